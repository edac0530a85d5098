// Plain-C experiment (not built by CMake; issue 17): does laying out the lazy AdamW state so a
// touched row's bytes are contiguous speed up the embedding step's optimizer phase? The step on a
// batch's scattered rows of a [V, C] table (V 50,000, C 384, 8,192 ids) with the state as
// separate P, M, S (adamw_segments' layout: 3 runs of 1.5 KB per row), P + interleaved [M|S] rows
// (1.5 + 3 KB), [P|M|S] rows (4.5 KB), and chunks of 16 floats of P, M, S interleaved (one
// forward stream per row); plus the separate and [P|M|S] layouts on rows 0..U-1 (no scatter).
// Each gradient row is summed per id inside the update pass (no coalesced gradient), as
// adamw_segments does. Single thread, 2 MiB pages (madvise), a 64 MB write between steps for
// the rest of a training step; layouts take turns and are compared by the median per-step ratio.
//
//   gcc -O3 -march=native -fno-math-errno -o /tmp/layout tools/experiments/lazy_adamw_layout.c -lm
//   /tmp/layout 60      # uniform ids;   /tmp/layout 60 1   # Zipf(1) ids
//
// Result on the development machine (AMD EPYC, AVX-512, 2 vCPUs, load 1.8-5.4, Dec 2026):
// against separate P, M, S, [M|S] rows 0.94-0.99x, [P|M|S] rows 0.93-0.99x, chunked 1.00-1.05x
// (one run of Zipf ids gave 1.17x / 1.11x, the others 0.97-1.02x): no layout reaches the 1.4x
// that would pay for changing LazyAdamW's state, so adamw_segments keeps separate [V, C] tensors.
// Interleaving within a row puts three sub-streams in one 4 KB page, which the stride
// prefetchers follow no better than three separate rows.
#define _GNU_SOURCE
#include <math.h>
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

static int64_t ids[R], pos[R], uniq[R], starts[R + 1], count[V + 1];
static int64_t U;
static void group(void) {
  memset(count, 0, sizeof(count));
  for (int i = 0; i < R; ++i)
    count[ids[i] + 1]++;
  for (int v = 0; v < V; ++v)
    count[v + 1] += count[v];
  static int64_t fill[V];
  memcpy(fill, count, sizeof(int64_t) * V);
  for (int i = 0; i < R; ++i)
    pos[fill[ids[i]]++] = i;
  U = 0;
  for (int v = 0; v < V; ++v)
    if (count[v + 1] > count[v]) {
      uniq[U] = v;
      starts[U] = count[v];
      ++U;
    }
  starts[U] = R;
}

static const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.0f, ss = 1e-2f,
                   bc2 = 0.05f;

// g = the sum of id u's gradient rows (its positions' rows of D).
static inline void sum_rows(int64_t u, const float* D, float* g) {
  memset(g, 0, sizeof(float) * C);
  for (int64_t k = starts[u]; k < starts[u + 1]; ++k) {
    const float* d = D + pos[k] * C;
    for (int j = 0; j < C; ++j)
      g[j] += d[j];
  }
}

// AdamW on n elements of a row.
static inline void update(float* restrict p, float* restrict m, float* restrict s, const float* g,
                          int n) {
  for (int j = 0; j < n; ++j) {
    float w = p[j] * (1.0f - lr * wd);
    float mm = b1 * m[j] + (1.0f - b1) * g[j];
    float sv = b2 * s[j] + (1.0f - b2) * g[j] * g[j];
    m[j] = mm;
    s[j] = sv;
    p[j] = w - ss * mm / (sqrtf(sv) / bc2 + eps);
  }
}

// Row r's P at P + r * p_stride, its M and S at M, S + r * ms_stride.
static void step(float* P, size_t p_stride, float* M, float* S, size_t ms_stride, const float* D) {
  float g[C] __attribute__((aligned(64)));
  for (int64_t u = 0; u < U; ++u) {
    sum_rows(u, D, g);
    const size_t row = (size_t)uniq[u];
    update(P + row * p_stride, M + row * ms_stride, S + row * ms_stride, g, C);
  }
}

// Chunked layouts: per row, chunks of 16 of P, M, S (pms = 1) or of M, S (pms = 0, P separate),
// so a row is read as one forward stream per array.
static void step_chunked(float* P, float* MS, int pms, const float* D) {
  float g[C] __attribute__((aligned(64)));
  const size_t ms_row = pms ? 3 * C : 2 * C, chunk = pms ? 48 : 32;
  for (int64_t u = 0; u < U; ++u) {
    sum_rows(u, D, g);
    const size_t row = (size_t)uniq[u];
    float* base = MS + row * ms_row;
    for (int c = 0; c < C / 16; ++c) {
      float* p = pms ? base + c * chunk : P + row * C + c * 16;
      float* m = pms ? p + 16 : base + c * chunk;
      update(p, m, m + 16, g + c * 16, 16);
    }
  }
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 30;
  double zipf = argc > 2 ? atof(argv[2]) : 0;
  float* A_p = alloc_huge((size_t)V * C);
  float* A_m = alloc_huge((size_t)V * C);
  float* A_s = alloc_huge((size_t)V * C);
  float* B_p = alloc_huge((size_t)V * C);
  float* B_ms = alloc_huge((size_t)V * 2 * C);
  float* C_pms = alloc_huge((size_t)V * 3 * C);
  float* D = alloc_huge((size_t)R * C);
  // A flush buffer: the rest of a training step (forward, other layers) evicts the caches.
  size_t flush_n = (64u << 20) / 4;
  float* flush = alloc_huge(flush_n);
  double* cdf = NULL;
  if (zipf > 0) {
    cdf = malloc(sizeof(double) * V);
    double t = 0;
    for (int k = 0; k < V; ++k)
      cdf[k] = t += pow(k + 1, -zipf);
    for (int k = 0; k < V; ++k)
      cdf[k] /= t;
  }
  enum { K = 7 };
  const char* names[K] = {"separate P, M, S",
                          "P + [M|S]",
                          "[P|M|S]",
                          "separate, rows 0..U-1",
                          "[P|M|S], rows 0..U-1",
                          "P + [M16|S16] chunks",
                          "[P16|M16|S16] chunks"};
  double* t[K];
  for (int k = 0; k < K; ++k)
    t[k] = calloc(steps, sizeof(double));
  double touched = 0;
  for (int st = 0; st < steps; ++st) {
    for (int i = 0; i < R; ++i) {
      if (zipf > 0) {
        double x = (double)(xr() >> 11) * 0x1p-53;
        int lo = 0, hi = V - 1;
        while (lo < hi) {
          int mid = (lo + hi) / 2;
          if (cdf[mid] < x)
            lo = mid + 1;
          else
            hi = mid;
        }
        ids[i] = ((int64_t)lo * 7919) % V;  // a fixed scatter of ranks over the table
      } else {
        ids[i] = (int64_t)(xr() % V);
      }
    }
    group();
    touched += U;
    for (int i = 0; i < R * C; ++i)
      D[i] = 1e-3f * (float)((i * 31 + st) % 17 - 8);
    int64_t saved[R];
    memcpy(saved, uniq, sizeof(int64_t) * U);
    for (int r = 0; r < K; ++r) {
      int k = (r + st) % K;
      for (size_t i = 0; i < flush_n; i += 16)
        flush[i] += 1.0f;
      // D was just written by backward: keep it warm as in the real step.
      volatile float sink = 0;
      for (int i = 0; i < R * C; i += 16)
        sink += D[i];
      memcpy(uniq, saved, sizeof(int64_t) * U);
      if (k == 3 || k == 4)
        for (int64_t u = 0; u < U; ++u)
          uniq[u] = u;
      double s = now_ms();
      switch (k) {
        case 0:
          step(A_p, C, A_m, A_s, C, D);
          break;
        case 1:
          step(B_p, C, B_ms, B_ms + C, 2 * C, D);
          break;
        case 2:
          step(C_pms, 3 * C, C_pms + C, C_pms + 2 * C, 3 * C, D);
          break;
        case 3:
          step(A_p, C, A_m, A_s, C, D);
          break;
        case 4:
          step(C_pms, 3 * C, C_pms + C, C_pms + 2 * C, 3 * C, D);
          break;
        case 5:
          step_chunked(B_p, B_ms, 0, D);
          break;
        case 6:
          step_chunked(NULL, C_pms, 1, D);
          break;
      }
      t[k][st] = now_ms() - s;
    }
    memcpy(uniq, saved, sizeof(int64_t) * U);
  }
  printf("V %d C %d R %d, %s, %.0f distinct rows per step, %d steps, median ms (single thread)\n",
         V, C, R, zipf > 0 ? "zipf" : "uniform", touched / steps, steps);
  double* ratio[K];
  for (int k = 0; k < K; ++k) {
    ratio[k] = calloc(steps, sizeof(double));
    for (int st = 0; st < steps; ++st)
      ratio[k][st] = t[0][st] / t[k][st];
  }
  for (int k = 0; k < K; ++k) {
    qsort(ratio[k], steps, sizeof(double), cmp);
    qsort(t[k], steps, sizeof(double), cmp);
    printf("  %-24s %7.3f ms (min %7.3f)  separate / this, median per step %.2fx\n", names[k],
           t[k][steps / 2], t[k][0], ratio[k][steps / 2]);
  }
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  while (f && fgets(line, sizeof(line), f))
    if (strstr(line, "AnonHugePages") || strstr(line, "Rss:")) printf("  %s", line);
  return 0;
}
