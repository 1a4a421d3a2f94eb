    /* secondary_a64(block = x0): where another CPU that PSCI CPU_ON started enters, at the
       boot CPU's exception level with its MMU and caches off (x0 is the context id, the
       physical address of its boot block, cleaned to the point of coherency by the boot
       CPU). The block, 8 bytes each: MAIR, TCR, TTBR0, SCTLR, CPACR_EL1 (at EL1) or
       CPTR_EL2 (at EL2), VBAR, the stack's top, the Rust entry. It takes the boot CPU's
       translation regime (U-Boot's identity map, the same tables), its FP/SIMD access and
       exception vectors, turns the MMU and caches on as the boot CPU has them, moves to its
       stack and branches to the entry with x0 still the block. Position independent. */
    .section .text
    .globl secondary_a64, secondary_a64_end
    .balign 8
secondary_a64:
    msr daifset, #0xf
    ldp x1, x2, [x0]
    ldp x3, x4, [x0, #16]
    ldp x5, x6, [x0, #32]
    mrs x7, CurrentEL
    cmp x7, #8
    b.eq 2f
    msr mair_el1, x1
    msr tcr_el1, x2
    msr ttbr0_el1, x3
    msr cpacr_el1, x5
    msr vbar_el1, x6
    isb
    tlbi vmalle1
    ic iallu
    dsb nsh
    isb
    msr sctlr_el1, x4
    isb
    b 3f
2:  msr mair_el2, x1
    msr tcr_el2, x2
    msr ttbr0_el2, x3
    msr cptr_el2, x5
    msr vbar_el2, x6
    isb
    tlbi alle2
    ic iallu
    dsb nsh
    isb
    msr sctlr_el2, x4
    isb
3:  ldp x1, x2, [x0, #48]
    mov sp, x1
    br x2
secondary_a64_end:
