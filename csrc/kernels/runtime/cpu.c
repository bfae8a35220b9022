/* CPU feature detection and the kernel path (see cpu.h).
 *
 * Detection is cpuid for the instructions plus xgetbv for the OS: AVX state
 * (XCR0 bits 1-2) for AVX2, and additionally the opmask and upper-zmm state
 * (bits 5-7) for AVX-512.  A CPU that has the instructions under an OS (or a
 * hypervisor) that does not save those registers must not use them. */
#include "cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MYATT_X86
#include <cpuid.h>
#endif

#ifdef MYATT_X86
static unsigned long long mk_xgetbv0(void)
{
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

/* AVX512_BF16 (vdpbf16ps, vcvtneps2bf16) and AVX512BW (its masked 16-bit
 * stores), beside AVX-512 F + VL: cpuid leaf 7, subleaf 1, EAX bit 5; leaf
 * 7, subleaf 0, EBX bit 30. */
static int mk_detect_bf16(void)
{
#ifdef MYATT_X86
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !((ebx >> 30) & 1))
        return 0;
    if (eax < 1 || !__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx))
        return 0;
    return (eax >> 5) & 1;
#else
    return 0;
#endif
}

static mk_isa mk_detect(void)
{
#ifdef MYATT_X86
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        return MK_ISA_PORTABLE;
    const int has_fma = (ecx >> 12) & 1, has_osxsave = (ecx >> 27) & 1, has_avx = (ecx >> 28) & 1;
    if (!has_osxsave || !has_avx || !has_fma)
        return MK_ISA_PORTABLE;
    const unsigned long long xcr0 = mk_xgetbv0();
    if ((xcr0 & 0x6) != 0x6)                          /* XMM + YMM state */
        return MK_ISA_PORTABLE;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx))
        return MK_ISA_PORTABLE;
    const int has_avx2 = (ebx >> 5) & 1;
    const int has_avx512f = (ebx >> 16) & 1, has_avx512vl = (ebx >> 31) & 1;
    if (!has_avx2)
        return MK_ISA_PORTABLE;
    if (has_avx512f && has_avx512vl && (xcr0 & 0xe6) == 0xe6)   /* + opmask, zmm state */
        return MK_ISA_AVX512;
    return MK_ISA_AVX2;
#else
    return MK_ISA_PORTABLE;
#endif
}

static const char *const mk_isa_names[] = {"portable", "avx2", "avx512"};

const char *mk_isa_name(mk_isa isa)
{
    return (unsigned)isa < 3 ? mk_isa_names[isa] : "portable";
}

int mk_torch_float_lanes(void)
{
    return mk_cpu_isa() == MK_ISA_AVX512 ? 16 : 8;
}

/* Decided once per process (pthread_once: concurrent first calls wait for the
 * one that decides; the glue already decides at import, under the GIL). */
static pthread_once_t mk_once = PTHREAD_ONCE_INIT;
static mk_isa mk_best, mk_chosen;
static int mk_bf16;
static const char *mk_note;
static char mk_note_buf[160];

static void mk_set_note(const char *want, const char *why, mk_isa best)
{
    snprintf(mk_note_buf, sizeof mk_note_buf, "MYATT_KERNEL=%.20s %s; using %s",
             want, why, mk_isa_names[best]);
    mk_note = mk_note_buf;
}

static void mk_decide(void)
{
    mk_best = mk_detect();
    mk_chosen = mk_best;
    const int bf16 = mk_best == MK_ISA_AVX512 && mk_detect_bf16();
    const char *want = getenv("MYATT_KERNEL");
    if (want == NULL || want[0] == '\0') {
        mk_bf16 = bf16;
        return;
    }
    for (int isa = 0; isa < 3; isa++) {
        if (strcmp(want, mk_isa_names[isa]) != 0)
            continue;
        if ((mk_isa)isa <= mk_best)
            mk_chosen = (mk_isa)isa;
        else
            mk_set_note(want, "is not supported by this CPU", mk_best);
        return;
    }
    mk_set_note(want, "is not one of portable, avx2, avx512", mk_best);
    mk_bf16 = bf16;
}

int mk_cpu_bf16_dot(void)
{
    pthread_once(&mk_once, mk_decide);
    return mk_bf16;
}

mk_isa mk_cpu_best_isa(void)
{
    pthread_once(&mk_once, mk_decide);
    return mk_best;
}

mk_isa mk_cpu_isa(void)
{
    pthread_once(&mk_once, mk_decide);
    return mk_chosen;
}

const char *mk_cpu_note(void)
{
    pthread_once(&mk_once, mk_decide);
    return mk_note;
}
