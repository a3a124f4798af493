/* CPU identification and instruction sets: CPUID for what the CPU has, XCR0 for
 * what the OS saves on context switch, arch_prctl for AMX tile-data permission. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#define KT_HW_X86 1
#else
#define KT_HW_X86 0
#endif

#include "hw_internal.h"
#include "kt_internal.h"

/* Linux arch_prctl codes for dynamically enabled XSAVE state (since 5.16). */
#define KT_ARCH_GET_XCOMP_PERM 0x1022
#define KT_ARCH_REQ_XCOMP_PERM 0x1023
#define KT_XFEATURE_XTILECFG 17
#define KT_XFEATURE_XTILEDATA 18

/* XCR0 state components an ISA needs the OS to save. */
#define XCR0_SSE (UINT64_C(1) << 1)
#define XCR0_YMM (UINT64_C(1) << 2)
#define XCR0_OPMASK (UINT64_C(1) << 5)
#define XCR0_ZMM_HI256 (UINT64_C(1) << 6)
#define XCR0_HI16_ZMM (UINT64_C(1) << 7)
#define XCR0_AVX (XCR0_SSE | XCR0_YMM)
#define XCR0_AVX512 (XCR0_AVX | XCR0_OPMASK | XCR0_ZMM_HI256 | XCR0_HI16_ZMM)
#define XCR0_AMX ((UINT64_C(1) << KT_XFEATURE_XTILECFG) | (UINT64_C(1) << KT_XFEATURE_XTILEDATA))

#define ISA_AVX_FAMILY (KT_ISA_AVX2 | KT_ISA_FMA | KT_ISA_F16C | KT_ISA_AVXVNNI)
#define ISA_AVX512_FAMILY                                                                      \
    (KT_ISA_AVX512F | KT_ISA_AVX512BW | KT_ISA_AVX512VL | KT_ISA_AVX512DQ | KT_ISA_AVX512VNNI | \
     KT_ISA_AVX512BF16 | KT_ISA_AVX512VBMI | KT_ISA_AVX512FP16)
#define ISA_AMX_FAMILY (KT_ISA_AMX_TILE | KT_ISA_AMX_INT8 | KT_ISA_AMX_BF16)

/* Removes the trailing and repeated spaces CPU brand strings are padded with. */
static void squeeze_spaces(char *s)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (isspace((unsigned char)*r) && (w == s || w[-1] == ' '))
            continue;
        *w++ = isspace((unsigned char)*r) ? ' ' : *r;
    }
    while (w > s && w[-1] == ' ')
        w--;
    *w = '\0';
}

/* "model name : ..." from /proc/cpuinfo, for CPUs without a brand string. */
static void model_from_proc(char *out, size_t size)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        const char *colon = strchr(line, ':');
        if (colon) {
            snprintf(out, size, "%s", colon + 1);
            squeeze_spaces(out);
        }
        break;
    }
    fclose(f);
}

#if KT_HW_X86
static void cpuid(uint32_t leaf, uint32_t subleaf, uint32_t r[4])
{
    __cpuid_count(leaf, subleaf, r[0], r[1], r[2], r[3]);
}

static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Asks the kernel for AMX tile data (the state is too large to be enabled by
 * default); KT_HW_AMX_GRANTED only when the permission bitmap confirms it. */
static int32_t request_amx(int32_t *err)
{
    *err = 0;
    if (syscall(SYS_arch_prctl, KT_ARCH_REQ_XCOMP_PERM, KT_XFEATURE_XTILEDATA) != 0) {
        *err = errno;
        return KT_HW_AMX_REFUSED;
    }
    uint64_t perm = 0;
    if (syscall(SYS_arch_prctl, KT_ARCH_GET_XCOMP_PERM, &perm) != 0) {
        *err = errno;
        return KT_HW_AMX_REFUSED;
    }
    if (!(perm & (UINT64_C(1) << KT_XFEATURE_XTILEDATA))) {
        *err = EPERM;
        return KT_HW_AMX_REFUSED;
    }
    return KT_HW_AMX_GRANTED;
}

void kt__hw_detect_cpu(kt__hw_state *s)
{
    uint32_t r[4];
    cpuid(0, 0, r);
    uint32_t max_leaf = r[0];
    memcpy(s->cpu_vendor + 0, &r[1], 4); /* EBX, EDX, ECX spell the vendor */
    memcpy(s->cpu_vendor + 4, &r[3], 4);
    memcpy(s->cpu_vendor + 8, &r[2], 4);
    s->cpu_vendor[12] = '\0';

    cpuid(0x80000000u, 0, r);
    if (r[0] >= 0x80000004u) {
        for (uint32_t i = 0; i < 3; i++) {
            cpuid(0x80000002u + i, 0, r);
            memcpy(s->cpu_model + 16 * i, r, 16);
        }
        s->cpu_model[48] = '\0';
        squeeze_spaces(s->cpu_model);
    }
    if (!s->cpu_model[0])
        model_from_proc(s->cpu_model, sizeof s->cpu_model);

    uint64_t isa = 0;
    int osxsave = 0, avx = 0;
    if (max_leaf >= 1) {
        cpuid(1, 0, r);
        /* [ECX] bit 12 FMA, 27 OSXSAVE, 28 AVX, 29 F16C */
        if (r[2] & (1u << 12))
            isa |= KT_ISA_FMA;
        if (r[2] & (1u << 29))
            isa |= KT_ISA_F16C;
        osxsave = (r[2] >> 27) & 1;
        avx = (r[2] >> 28) & 1;
    }
    if (max_leaf >= 7) {
        cpuid(7, 0, r);
        uint32_t ebx = r[1], ecx = r[2], edx = r[3], max_sub = r[0];
        static const struct {
            int reg; /* 1 EBX, 2 ECX, 3 EDX of leaf 7.0 */
            int bit;
            uint64_t isa;
        } leaf7[] = {
            {1, 5, KT_ISA_AVX2},        {1, 16, KT_ISA_AVX512F},    {1, 17, KT_ISA_AVX512DQ},
            {1, 30, KT_ISA_AVX512BW},   {1, 31, KT_ISA_AVX512VL},   {2, 1, KT_ISA_AVX512VBMI},
            {2, 11, KT_ISA_AVX512VNNI}, {3, 22, KT_ISA_AMX_BF16},   {3, 23, KT_ISA_AVX512FP16},
            {3, 24, KT_ISA_AMX_TILE},   {3, 25, KT_ISA_AMX_INT8},
        };
        for (size_t i = 0; i < KT_ARRAY_LEN(leaf7); i++) {
            uint32_t reg = leaf7[i].reg == 1 ? ebx : leaf7[i].reg == 2 ? ecx : edx;
            if (reg & (1u << leaf7[i].bit))
                isa |= leaf7[i].isa;
        }
        if (max_sub >= 1) {
            cpuid(7, 1, r);
            /* [EAX] bit 4 AVX-VNNI, bit 5 AVX512-BF16 */
            if (r[0] & (1u << 4))
                isa |= KT_ISA_AVXVNNI;
            if (r[0] & (1u << 5))
                isa |= KT_ISA_AVX512BF16;
        }
    }
    /* Every AVX-family bit needs AVX itself. */
    if (!avx)
        isa &= ~(ISA_AVX_FAMILY | ISA_AVX512_FAMILY);
    s->isa_cpuid = isa;

    /* The OS must save the registers: without OSXSAVE no XCR0, no AVX at all. */
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    uint64_t usable = isa;
    if ((xcr0 & XCR0_AVX) != XCR0_AVX)
        usable &= ~(ISA_AVX_FAMILY | ISA_AVX512_FAMILY);
    if ((xcr0 & XCR0_AVX512) != XCR0_AVX512)
        usable &= ~ISA_AVX512_FAMILY;

    s->amx_permission = KT_HW_AMX_NOT_APPLICABLE;
    s->amx_errno = 0;
    if ((usable & KT_ISA_AMX_TILE) && (xcr0 & XCR0_AMX) == XCR0_AMX) {
        s->amx_permission = request_amx(&s->amx_errno);
        if (s->amx_permission != KT_HW_AMX_GRANTED)
            usable &= ~ISA_AMX_FAMILY;
    } else {
        usable &= ~ISA_AMX_FAMILY;
    }
    s->isa_usable = usable;
}
#else
void kt__hw_detect_cpu(kt__hw_state *s)
{
    model_from_proc(s->cpu_model, sizeof s->cpu_model);
    s->isa_cpuid = 0;
    s->isa_usable = 0;
    s->amx_permission = KT_HW_AMX_NOT_APPLICABLE;
}
#endif
