/* secondary_x86: where an application processor of the PC that INIT and a start-up IPI
   started enters, in real mode at CS:IP = page >> 4 : 0 (AT&T syntax, assembled by
   src/cpu/apic.rs's global_asm!). The boot CPU copies secondary_x86 .. secondary_x86_end
   to a page below 640 KiB (the IPI's vector names it) and fills the boot block at byte 64
   (src/cpu/apic.rs's `Block`, whose field offsets Rust asserts; here as bytes of the
   page, the 64-bit code counts them from the block, 64 less):

     64  the GDT descriptor for real mode (limit, 32-bit base: this page's GDT)
     72  far pointer to secondary_x86_pm (32-bit offset, selector 0x08)
     80  far pointer to secondary_x86_lm (32-bit offset, selector 0x10)
     88  CR0, 96 CR3 (below 4 GiB), 104 CR4, 112 EFER: the boot CPU's
     120 the boot CPU's GDTR, 136 its IDTR, 152 its code selector, 160 its data selector
     168 the stack's top, 176 the Rust entry (called with the block)

   Real mode: this page's GDT, protection on, a far jump to 32-bit code; there CR4 (PAE),
   CR3, EFER (LME) and CR0 (PG) take the CPU to long mode, and a far jump to 64-bit code
   loads the boot CPU's GDT and IDT, the stack and its selectors, and calls the entry,
   which never returns. %ebx holds the page's address throughout. Position independent:
   every address of the page is computed from CS or written into the block. */

    .section .text.secondary_x86, "ax"
    .balign 64
    .globl secondary_x86, secondary_x86_block, secondary_x86_gdt
    .globl secondary_x86_pm, secondary_x86_lm, secondary_x86_end
    .code16
secondary_x86:
    jmp secondary_x86_real
    .balign 64
secondary_x86_block:
    .skip 192
    /* The GDT of the way up: 0x08 32-bit code, 0x10 64-bit code, 0x18 data, all flat. */
    .balign 16
secondary_x86_gdt:
    .quad 0
    .quad 0x00cf9a000000ffff
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff

secondary_x86_real:
    cli
    cld
    mov %cs, %ax
    mov %ax, %ds
    xor %ebx, %ebx
    mov %ax, %bx
    shl $4, %ebx
    lgdtl 64
    mov %cr0, %eax
    or $1, %eax
    mov %eax, %cr0
    ljmpl *72

    .code32
secondary_x86_pm:
    mov $0x18, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    mov 104(%ebx), %eax
    mov %eax, %cr4
    mov 96(%ebx), %eax
    mov %eax, %cr3
    mov $0xc0000080, %ecx
    mov 112(%ebx), %eax
    mov 116(%ebx), %edx
    wrmsr
    mov 88(%ebx), %eax
    mov %eax, %cr0
    ljmpl *80(%ebx)

    .code64
secondary_x86_lm:
    mov %ebx, %ebx
    lea 64(%rbx), %rdi
    lgdt 56(%rdi)
    lidt 72(%rdi)
    mov 104(%rdi), %rsp
    mov 88(%rdi), %rax
    push %rax
    lea 1f(%rip), %rax
    push %rax
    lretq
1:  mov 96(%rdi), %rax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    xor %eax, %eax
    mov %eax, %fs
    mov %eax, %gs
    call *112(%rdi)
2:  cli
    hlt
    jmp 2b
secondary_x86_end:

    .text
