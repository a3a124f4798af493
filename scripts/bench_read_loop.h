/* The read loop the developer benches (decode_ab.c, lf_kernel_bench.c) hold a
 * kernel's reads against: the sum of n floats at a (32-byte aligned), four
 * independent AVX2 sums so the loads, not the adds, set the pace. */
#ifndef KT_SCRIPTS_BENCH_READ_LOOP_H
#define KT_SCRIPTS_BENCH_READ_LOOP_H

#include <immintrin.h>
#include <stddef.h>

__attribute__((target("avx2"))) static float read_loop(const float *a, size_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 32 <= n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(a + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(a + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(a + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(a + i + 24));
    }
    float v[8];
    _mm256_storeu_ps(v, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

#endif
