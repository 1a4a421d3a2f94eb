    /* last_copy(list = rdi, image cr3 = rsi, jump address = rdx): copies the deferred
       pages (a list of pages: count, next, then count (source, destination) pairs) and
       enters the image kernel. Position independent: it runs from a safe page. */
    .section .text
    .globl last_copy, last_copy_end
last_copy:
    mov %rsi, %r9
    mov %rdx, %r10
    mov %rdi, %r11
4:  test %r11, %r11
    jz 7f
    mov (%r11), %r8
    lea 16(%r11), %rax
5:  test %r8, %r8
    jz 6f
    mov (%rax), %rsi
    mov 8(%rax), %rdi
    mov $512, %ecx
    rep movsq
    add $16, %rax
    dec %r8
    jmp 5b
6:  mov 8(%r11), %r11
    jmp 4b
7:  jmp *%r10
last_copy_end:
