    /* last_copy_a64(list = x0, entry = x1, cache line bytes = x2, busy ranges = x3,
       their count = x4): the arm64 restorer's last steps, run from a safe page with the
       firmware's identity map (MMU and caches on):
       1. cleans and invalidates to the point of coherency the deferred-page list (count,
          next, then count (source, destination) pairs per page) and every source page,
          and the busy ranges ((start, end) pairs): the memory the copies overwrite;
       2. turns the MMU and the caches off at the current exception level;
       3. copies the deferred pages to their places, uncached, 16 aligned bytes a step;
       4. branches to the image kernel's MMU-off entry (cpu_resume, physical).
       Position independent; it writes only the deferred pages' destinations. */
    .section .text
    .globl last_copy_a64, last_copy_a64_end
    .balign 8
last_copy_a64:
    sub x5, x2, #1
    mov x9, x0
1:  cbz x9, 4f
    mov x6, x9
    add x7, x9, #4096
10: dc civac, x6
    add x6, x6, x2
    cmp x6, x7
    b.lo 10b
    ldr x10, [x9]
    add x11, x9, #16
2:  cbz x10, 3f
    ldr x6, [x11]
    add x7, x6, #4096
11: dc civac, x6
    add x6, x6, x2
    cmp x6, x7
    b.lo 11b
    add x11, x11, #16
    sub x10, x10, #1
    b 2b
3:  ldr x9, [x9, #8]
    b 1b
4:  mov x10, x4
    mov x11, x3
5:  cbz x10, 7f
    ldp x6, x7, [x11], #16
    bic x6, x6, x5
6:  cmp x6, x7
    b.hs 12f
    dc civac, x6
    add x6, x6, x2
    b 6b
12: sub x10, x10, #1
    b 5b
7:  dsb sy
    mrs x6, CurrentEL
    cmp x6, #8
    b.eq 8f
    mrs x6, sctlr_el1
    bic x6, x6, #1
    bic x6, x6, #4
    bic x6, x6, #0x1000
    msr sctlr_el1, x6
    b 9f
8:  mrs x6, sctlr_el2
    bic x6, x6, #1
    bic x6, x6, #4
    bic x6, x6, #0x1000
    msr sctlr_el2, x6
9:  isb
    ic iallu
    dsb nsh
    isb
    mov x9, x0
13: cbz x9, 16f
    ldr x10, [x9]
    add x11, x9, #16
14: cbz x10, 15f
    ldp x12, x13, [x11], #16
    mov x14, #4096
17: ldp x6, x7, [x12], #16
    stp x6, x7, [x13], #16
    subs x14, x14, #16
    b.ne 17b
    sub x10, x10, #1
    b 14b
15: ldr x9, [x9, #8]
    b 13b
16: dsb sy
    isb
    br x1
last_copy_a64_end:
