// Plain-C experiment (not built by CMake; issue 17, on a Zen 3): how far below adamw_segments'
// time can the lazy AdamW step of the V = 50,000 embedding go on this machine? The step as
// adamw_segments runs it (ids increasing, each id's rows of D summed through the position list,
// then P, M, S updated; separate [V, C] tensors, 2 MiB pages, a 64 MB write before each step for
// the rest of a training step) against variants that change one thing each:
//   prefetch   software prefetch of the rows of the id two ahead (P, M, S and its D rows)
//   one div    sqrt(s) * (1 / bc2) in place of sqrt(s) / bc2: one division per element, not two
//   first-pos  ids in order of their first position, so D is read nearly in order
//   two-pass   each row's P, M, S copied to a local buffer first (all their loads in flight),
//              then updated from it
// and the lookup (Y = P[ids], 8,192 rows) plain and with the row two ahead prefetched. Variants
// take turns; figures are median per-step ratios, so load that comes and goes cancels.
//
//   f=tools/experiments/lazy_adamw_floor.c
//   gcc -O3 -march=native -fno-math-errno -pthread -o /tmp/floor $f -lm
//   /tmp/floor 80 1     # 80 steps, 1 thread;   /tmp/floor 80 2   # the ids split over 2 threads
//
// Result on the 2-vCPU Zen 3 (EPYC Milan, AVX2, 32 MiB L3), 60 steps, load 4.5 from other work
// (Dec 2026): one thread: prefetch 0.99x, one div 1.04x, first-pos 0.93x, two-pass 0.78x, the
// plain step 7.0 ms median (6.2 min: 80 MB moved, ~13 GB/s); two threads (which that load left
// little room for) 0.99x, 1.02x, 0.93x, 0.75x. The lookup: 2.5 ms, prefetch 1.09-1.12x. An
// earlier version of these loops at load 3 gave the same picture (prefetch 0.95-1.02x, one div
// 1.02-1.13x), with the plain step at 5.6 ms on one thread and 3.3-3.8 ms (min) on two, where
// adamw_segments takes 9.3 ms of CPU time on 2 threads in bench sparse --embedding (main, load
// 1.3): the kernel is at this loop's speed. Rows in L1 cost 245 ns each with two divisions and
// 161 with one, so arithmetic is about a fifth of a scattered row's ~1.2 us of CPU time: the
// step is bound by moving scattered 1.5 KB rows (each its own DRAM pages), which no order,
// prefetch or arithmetic change here moves by more than the noise.
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { V = 50000, C = 384, R = 8192 };

static float* alloc_huge(size_t n) {
  size_t bytes = (n * sizeof(float) + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
  float* p = aligned_alloc(2u << 20, bytes);
  madvise(p, bytes, MADV_HUGEPAGE);
  for (size_t i = 0; i < n; ++i)
    p[i] = 0.01f * (float)(i % 97);
  return p;
}
static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}
static uint64_t rng_state = 88172645463325252ull;
static uint64_t xr(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

// The batch grouped by id (as group_ids): uniq increasing, pos id by id, starts [U + 1]; and the
// same groups in order of first position (fp_*).
static int64_t ids[R], pos[R], uniq[R], starts[R + 1], count[V + 1], U;
static int64_t fp_uniq[R], fp_begin[R], fp_end[R];
static void group(void) {
  static int64_t fill[V], at[R];
  memset(count, 0, sizeof(count));
  for (int i = 0; i < R; ++i)
    count[ids[i] + 1]++;
  for (int v = 0; v < V; ++v)
    count[v + 1] += count[v];
  memcpy(fill, count, sizeof(int64_t) * V);
  for (int i = 0; i < R; ++i)
    pos[fill[ids[i]]++] = i;
  U = 0;
  for (int v = 0; v < V; ++v)
    if (count[v + 1] > count[v]) {
      uniq[U] = v;
      starts[U++] = count[v];
    }
  starts[U] = R;
  for (int i = 0; i < R; ++i)
    at[i] = -1;
  for (int64_t u = 0; u < U; ++u)
    at[pos[starts[u]]] = u;
  int64_t n = 0;
  for (int i = 0; i < R; ++i)
    if (at[i] >= 0) {
      fp_uniq[n] = uniq[at[i]];
      fp_begin[n] = starts[at[i]];
      fp_end[n++] = starts[at[i] + 1];
    }
}

static const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, ss = 1e-2f, bc2 = 0.05f;
enum { PLAIN, PREFETCH, ONE_DIV, FIRST_POS, TWO_PASS, LOOKUP, LOOKUP_PREFETCH, K };
static const char* names[K] = {"step: plain",     "step: prefetch", "step: one div",
                               "step: first-pos", "step: two-pass", "lookup: plain",
                               "lookup: prefetch"};
static float *P, *M, *S, *D, *Y;

static void prefetch_row(const float* p) {
  for (int j = 0; j < C; j += 16)
    __builtin_prefetch(p + j, 1, 3);
}

// AdamW on a row (adamw_segments' arithmetic; `one_div` folds 1 / bc2 into a product). Inlined
// with a constant `one_div`, so each variant's loop is vectorised on its own.
static inline void update(float* restrict p, float* restrict m, float* restrict s,
                          const float* restrict g, int one_div) {
  const float inv_bc2 = 1.0f / bc2;
  for (int j = 0; j < C; ++j) {
    const float mm = b1 * m[j] + (1.0f - b1) * g[j];
    const float sv = b2 * s[j] + (1.0f - b2) * g[j] * g[j];
    m[j] = mm;
    s[j] = sv;
    p[j] -= ss * mm / ((one_div ? sqrtf(sv) * inv_bc2 : sqrtf(sv) / bc2) + eps);
  }
}

// The same from copies of the row (two-pass): pl, ml, sl hold P, M, S's old values.
static inline void update_from(float* restrict p, float* restrict m, float* restrict s,
                               const float* restrict pl, const float* restrict ml,
                               const float* restrict sl, const float* restrict g) {
  for (int j = 0; j < C; ++j) {
    const float mm = b1 * ml[j] + (1.0f - b1) * g[j];
    const float sv = b2 * sl[j] + (1.0f - b2) * g[j] * g[j];
    m[j] = mm;
    s[j] = sv;
    p[j] = pl[j] - ss * mm / (sqrtf(sv) / bc2 + eps);
  }
}

// Ids [a, b) of the batch (in `variant`'s order).
static void step(int variant, int64_t a, int64_t b) {
  float g[C] __attribute__((aligned(64))), pl[C], ml[C], sl[C];
  const int fp = variant == FIRST_POS;
  for (int64_t u = a; u < b; ++u) {
    if (variant == PREFETCH && u + 2 < b) {
      const size_t next = (size_t)uniq[u + 2] * C;
      prefetch_row(P + next);
      prefetch_row(M + next);
      prefetch_row(S + next);
      for (int64_t k = starts[u + 2]; k < starts[u + 3]; ++k)
        prefetch_row(D + pos[k] * C);
    }
    const int64_t begin = fp ? fp_begin[u] : starts[u], end = fp ? fp_end[u] : starts[u + 1];
    memset(g, 0, sizeof(g));
    for (int64_t k = begin; k < end; ++k) {
      const float* d = D + pos[k] * C;
      for (int j = 0; j < C; ++j)
        g[j] += d[j];
    }
    const size_t row = (size_t)(fp ? fp_uniq[u] : uniq[u]) * C;
    if (variant == TWO_PASS) {
      memcpy(pl, P + row, sizeof(pl));
      memcpy(ml, M + row, sizeof(ml));
      memcpy(sl, S + row, sizeof(sl));
      update_from(P + row, M + row, S + row, pl, ml, sl, g);
    } else if (variant == ONE_DIV) {
      update(P + row, M + row, S + row, g, 1);
    } else {
      update(P + row, M + row, S + row, g, 0);
    }
  }
}

static void lookup(int variant, int64_t a, int64_t b) {
  for (int64_t i = a; i < b; ++i) {
    if (variant == LOOKUP_PREFETCH && i + 2 < b) prefetch_row(P + ids[i + 2] * C);
    memcpy(Y + i * C, P + ids[i] * C, sizeof(float) * C);
  }
}

struct Job {
  int variant;
  int64_t a, b;
};
static void* run_job(void* arg) {
  const struct Job* j = arg;
  if (j->variant >= LOOKUP)
    lookup(j->variant, j->a, j->b);
  else
    step(j->variant, j->a, j->b);
  return NULL;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? atoi(argv[1]) : 40, threads = argc > 2 ? atoi(argv[2]) : 1;
  P = alloc_huge((size_t)V * C);
  M = alloc_huge((size_t)V * C);
  S = alloc_huge((size_t)V * C);
  D = alloc_huge((size_t)R * C);
  Y = alloc_huge((size_t)R * C);
  const size_t flush_n = (64u << 20) / 4;
  float* flush = alloc_huge(flush_n);
  double* t[K];
  for (int k = 0; k < K; ++k)
    t[k] = calloc(steps, sizeof(double));
  for (int st = 0; st < steps; ++st) {
    for (int i = 0; i < R; ++i)
      ids[i] = (int64_t)(xr() % V);
    group();
    for (int r = 0; r < K; ++r) {
      const int k = (r + st) % K;
      for (size_t i = 0; i < flush_n; i += 16)
        flush[i] += 1.0f;
      // D was just written by backward: warm it as the real step finds it.
      volatile float sink = 0;
      for (int i = 0; i < R * C; i += 16)
        sink += D[i];
      const int64_t n = k >= LOOKUP ? R : U;
      struct Job jobs[2] = {{k, 0, threads > 1 ? n / 2 : n}, {k, n / 2, n}};
      const double start = now_ms();
      pthread_t other;
      if (threads > 1) pthread_create(&other, NULL, run_job, &jobs[1]);
      run_job(&jobs[0]);
      if (threads > 1) pthread_join(other, NULL);
      t[k][st] = now_ms() - start;
    }
  }
  printf("V %d C %d R %d, uniform ids, %d steps, %d thread(s): median ms, and baseline / this\n", V,
         C, R, steps, threads);
  for (int k = 0; k < K; ++k) {
    const int base = k >= LOOKUP ? LOOKUP : PLAIN;
    double* ratio = calloc(steps, sizeof(double));
    for (int st = 0; st < steps; ++st)
      ratio[st] = t[base][st] / t[k][st];
    qsort(ratio, steps, sizeof(double), cmp);
    double* sorted = calloc(steps, sizeof(double));
    memcpy(sorted, t[k], steps * sizeof(double));
    qsort(sorted, steps, sizeof(double), cmp);
    printf("  %-18s %7.3f ms (min %7.3f)  %.2fx\n", names[k], sorted[steps / 2], sorted[0],
           ratio[steps / 2]);
  }
  return 0;
}
