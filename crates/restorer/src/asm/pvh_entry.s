/* The restorer's entry (AT&T syntax, assembled by src/main.rs's global_asm!): the PVH
   note QEMU looks for, and the 32-bit entry that zeroes .bss, builds identity page tables
   for the first 4 GiB (2 MiB pages), enables PAE, long mode, NX and SSE, loads a GDT with
   the kernel's selectors and calls `restorer_main(start_info)`. */

    .section .note.Xen, "a", @note
    .balign 4
    .long 4, 8, 18          /* name size, desc size, XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .balign 4
    .quad pvh_start

    .section .text.pvh, "ax"
    .code32
    .globl pvh_start
pvh_start:
    cli
    cld
    mov %ebx, %esi
    /* zero .bss (page tables, stack, bitmap) */
    mov $__bss_start, %edi
    mov $__bss_end, %ecx
    sub %edi, %ecx
    shr $2, %ecx
    xor %eax, %eax
    rep stosl
    /* PML4[0] -> PDPT; PDPT[0..4] -> PD0..3; PDs: 2 MiB pages */
    mov $boot_pdpt, %eax
    or $3, %eax
    mov %eax, boot_pml4
    mov $boot_pd, %eax
    or $3, %eax
    mov $boot_pdpt, %edi
    mov $4, %ecx
1:  mov %eax, (%edi)
    add $4096, %eax
    add $8, %edi
    loop 1b
    mov $boot_pd, %edi
    mov $0x83, %eax
    xor %edx, %edx
    mov $2048, %ecx
2:  mov %eax, (%edi)
    mov %edx, 4(%edi)
    add $0x200000, %eax
    adc $0, %edx
    add $8, %edi
    loop 2b
    /* CR4: PAE | OSFXSR | OSXMMEXCPT */
    mov %cr4, %eax
    or $0x620, %eax
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    /* EFER: LME | NXE */
    mov $0xC0000080, %ecx
    rdmsr
    or $0x900, %eax
    wrmsr
    /* CR0: PG | MP, EM off */
    mov %cr0, %eax
    or $0x80000002, %eax
    and $0xFFFFFFFB, %eax
    mov %eax, %cr0
    lgdt boot_gdt_desc
    ljmp $0x10, $long_entry

    .code64
long_entry:
    mov $0x18, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    xor %eax, %eax
    mov %eax, %fs
    mov %eax, %gs
    mov $boot_stack_top, %rsp
    mov %esi, %edi
    call restorer_main
3:  hlt
    jmp 3b

    .section .rodata
    .balign 16
    /* The kernel's selectors: code 0x10, data 0x18, so the image kernel's GDT fits ours. */
boot_gdt:
    .quad 0, 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
boot_gdt_end:
boot_gdt_desc:
    .word boot_gdt_end - boot_gdt - 1
    .quad boot_gdt

    .section .bss
    .balign 4096
boot_pml4: .skip 4096
boot_pdpt: .skip 4096
boot_pd: .skip 4 * 4096
boot_stack: .skip 65536
boot_stack_top:
