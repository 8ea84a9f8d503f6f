/* The shim's exported symbols, x86-64 System V.
 *
 * Hooked functions (tables/hooks.def): `jmp *fracgpu_hook_target_<name>` — one indirect jump
 * into the typed C++ wrapper.
 * Every other public driver function (tables/driver_exports.def): a forwarder that jumps
 * through a slot holding the real driver's function. The slot is filled on first call
 * by fracgpu_resolve_forwarder, with every argument register saved around it, so
 * forwarders work for any signature without being typed anywhere.
 * dlopen / dlsym: ask fracgpu_dlopen_redirect / fracgpu_dlsym_redirect whether the name is the CUDA driver; if not,
 * tail-jumps to glibc's dlopen with the caller's return address intact.
 * No '#' comments here: this file goes through the C preprocessor. */

#define FRACGPU_STR(x) #x

    .text

#define FRACGPU_HOOK(symbol, base, version, pt, kind) \
    .globl symbol; .type symbol, @function; .p2align 4; \
symbol: \
    jmp *fracgpu_hook_target_##symbol(%rip); \
    .size symbol, .-symbol;
#include "tables/hooks.def"
#undef FRACGPU_HOOK

/* A forwarder is emitted only for names that no hook above defined. */
#define FRACGPU_DRIVER_SYMBOL(name) \
    .ifndef name; \
    .globl name; .type name, @function; .p2align 4; \
name: \
    movq fracgpu_fwd_slot_##name(%rip), %r11; \
    testq %r11, %r11; \
    jz 1f; \
    jmp *%r11; \
1:  leaq fracgpu_fwd_slot_##name(%rip), %r11; \
    jmp fracgpu_forward_slow; \
    .size name, .-name; \
    .pushsection .data.rel.local, "aw"; .p2align 3; \
fracgpu_fwd_slot_##name: .quad 0; .quad fracgpu_fwd_name_##name; \
    .popsection; \
    .pushsection .rodata.str1.1, "aMS", @progbits, 1; \
fracgpu_fwd_name_##name: .asciz FRACGPU_STR(name); \
    .popsection; \
    .endif;
#include "tables/driver_exports.def"
#undef FRACGPU_DRIVER_SYMBOL

/* Slow path of a forwarder: %r11 = &slot. Saves the six integer argument registers,
 * %rax (vector-register count of variadic calls) and %xmm0-7, resolves, restores and
 * jumps. On entry %rsp = 8 mod 16; 200 bytes keep the call aligned. */
    .p2align 4
    .type fracgpu_forward_slow, @function
fracgpu_forward_slow:
    subq $200, %rsp
    movq %rdi, 0(%rsp)
    movq %rsi, 8(%rsp)
    movq %rdx, 16(%rsp)
    movq %rcx, 24(%rsp)
    movq %r8, 32(%rsp)
    movq %r9, 40(%rsp)
    movq %rax, 48(%rsp)
    movdqu %xmm0, 56(%rsp)
    movdqu %xmm1, 72(%rsp)
    movdqu %xmm2, 88(%rsp)
    movdqu %xmm3, 104(%rsp)
    movdqu %xmm4, 120(%rsp)
    movdqu %xmm5, 136(%rsp)
    movdqu %xmm6, 152(%rsp)
    movdqu %xmm7, 168(%rsp)
    movq %r11, %rdi
    call fracgpu_resolve_forwarder
    movq %rax, %r11
    movq 0(%rsp), %rdi
    movq 8(%rsp), %rsi
    movq 16(%rsp), %rdx
    movq 24(%rsp), %rcx
    movq 32(%rsp), %r8
    movq 40(%rsp), %r9
    movq 48(%rsp), %rax
    movdqu 56(%rsp), %xmm0
    movdqu 72(%rsp), %xmm1
    movdqu 88(%rsp), %xmm2
    movdqu 104(%rsp), %xmm3
    movdqu 120(%rsp), %xmm4
    movdqu 136(%rsp), %xmm5
    movdqu 152(%rsp), %xmm6
    movdqu 168(%rsp), %xmm7
    addq $200, %rsp
    jmp *%r11
    .size fracgpu_forward_slow, .-fracgpu_forward_slow

/* dlopen(file, mode): redirect libcuda names to the shim, else glibc's dlopen. */
    .globl dlopen
    .type dlopen, @function
    .p2align 4
dlopen:
    pushq %rdi
    pushq %rsi
    subq $8, %rsp
    call fracgpu_dlopen_redirect
    addq $8, %rsp
    popq %rsi
    popq %rdi
    testq %rax, %rax
    jnz 2f
    jmp *fracgpu_real_dlopen_fn(%rip)
2:  ret
    .size dlopen, .-dlopen

/* dlsym(handle, name): our NVML wrappers for the names we answer, else glibc's dlsym
 * (tail jump: RTLD_NEXT keeps resolving relative to the real caller). */
    .globl dlsym
    .type dlsym, @function
    .p2align 4
dlsym:
    pushq %rdi
    pushq %rsi
    subq $8, %rsp
    call fracgpu_dlsym_redirect
    addq $8, %rsp
    popq %rsi
    popq %rdi
    testq %rax, %rax
    jnz 3f
    jmp *fracgpu_real_dlsym_fn(%rip)
3:  ret
    .size dlsym, .-dlsym

    .section .note.GNU-stack, "", @progbits
