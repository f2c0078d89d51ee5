/* raypass runtime: integer matrix product of 8-bit operands (qnn.matmul; see
   passinfra/codegen/compute/quantize.py). Appended to conv_runtime.c: one runtime object,
   one compile, one instruction-set choice (raypass_conv_isa); it also compiles on its own.

   out[m, n] = sum over k of (A[m, k] - za[m]) * (B[k, n] - zb[n]) in int32, exactly: the
   wrapped int32 of the exact sum, as the reference (int64, then cast) computes it.

   Every body computes on an unsigned A' and a signed B' (u8 x s8, the operand types of
   VPDPBUSD): A' = A ^ 0x80 when A is int8 (A' = A + 128, so za' = za + 128), B' = B ^ 0x80
   when B is uint8 (B' = B - 128, zb' = zb - 128), and

     sum (A - za)(B - zb) = S - zb' * rowsum(A') - za' * colsum(B') + K * za' * zb'

   with S = sum A' * B' (the columns' sums of B' are stored with the weight). Each term is an integer
   computed exactly modulo 2^32 (uint32 arithmetic), so the result does not depend on the
   order of the sums: the AMX, AVX-512 VNNI, AVX2 and portable bodies and any thread count
   give the same bits. No step saturates: TDPBUSD and VPDPBUSD add their u8 x s8 products
   in 32 bits, and the AVX2 body widens to 16 bits and uses VPMADDWD (a pair of products of
   at most 255 * 128 each fits in int32), where onnxruntime's AVX2 kernel uses VPMADDUBSW,
   whose 16-bit pair sums can saturate. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>

/* glibc declares it only with _DEFAULT_SOURCE, which -std=c11 leaves out */
extern long syscall(long number, ...);

#if !defined(RP_MACS_PER_WORK)
#error "the tunables come from passinfra/codegen/conv_runtime.py (runtime_defines), or -D on the command line"
#endif

extern int raypass_conv_isa(int level);
typedef int (*rp_chunk_fn)(void* ctx, int64_t begin, int64_t end);
extern int rp_parallel_for(rp_chunk_fn fn, void* ctx, int64_t extent, int64_t work_per_iteration);

/* output columns per panel (COLUMNS in passinfra/ir/op/qgemm_panels.py): B' is read in
   panels of [Kp / 4][32 columns][4 k] signed bytes and then the 32 columns' sums (int32),
   stored so at compile time for a constant weight (qgemm_panels), else packed here, one
   panel at a time */
#define RP_QGEMM_COLUMNS 32
/* k a panel holds is a multiple of this (zeros past K): whole AMX tiles of 64 bytes a row */
#define RP_QGEMM_DEPTH 64
#define RP_QGEMM_PANEL(Kp) ((Kp) * RP_QGEMM_COLUMNS + RP_QGEMM_COLUMNS * 4)
/* rows of A' per AMX step (two tiles of 16); A' is allocated in whole steps */
#define RP_QGEMM_AMX_ROWS 32

typedef struct {
  const uint8_t* A;        /* [M, Kp]: A' (unsigned), zeros past K */
  const uint32_t* rowsum;  /* [M] sum over k of each row of A' */
  const int16_t* A16;      /* AVX2 only: A' as int16, [M, Kp] */
  const uint8_t* tiles;    /* AMX only: A' in tiles, [M / 16][Kp / 64][16][64], zero rows past M
                              (a tile load reads 1 KiB in a row, not 16 rows Kp apart) */
  const uint8_t* B;        /* panels of B' (b_packed), or B [K, N] as given */
  const void* za;          /* A's zero point(s): one, or one per row (za_step 1) */
  const void* zb;          /* B's zero point(s): one, or one per column (zb_step 1) */
  int32_t* out;            /* [M, N] */
  int64_t M, N, K, Kp, za_step, zb_step;
  int a_signed, b_signed, b_packed;
  int body;                /* 3: AMX (blocks of 16 rows or more; fewer on VNNI), 2: AVX-512 VNNI,
                              1: AVX2, 0: portable */
} rp_qgemm;

static uint32_t rp_qgemm_za(const rp_qgemm* g, int64_t m) {
  const int64_t i = m * g->za_step;
  return g->a_signed ? (uint32_t)(((const int8_t*)g->za)[i] + 128) : ((const uint8_t*)g->za)[i];
}

static uint32_t rp_qgemm_zb(const rp_qgemm* g, int64_t n) {
  const int64_t i = n * g->zb_step;
  return g->b_signed ? (uint32_t)(int32_t)((const int8_t*)g->zb)[i]
                     : (uint32_t)((int32_t)((const uint8_t*)g->zb)[i] - 128);
}

/* out[m, n0 .. n0+cols) from its raw sums S, the columns' sums of B' and their zb' */
static void rp_qgemm_finish(const rp_qgemm* g, int64_t m, int64_t n0, int64_t cols, const uint32_t* sums,
                            const uint32_t* colsum, const uint32_t* zb) {
  const uint32_t za = rp_qgemm_za(g, m), ra = g->rowsum[m], k = (uint32_t)g->K;
  int32_t* out = g->out + m * g->N + n0;
  for (int64_t c = 0; c < cols; c++) out[c] = (int32_t)(sums[c] - zb[c] * ra - za * colsum[c] + k * za * zb[c]);
}

/* the same for a whole panel's 32 columns, 8 at a time (the same integers) */
__attribute__((target("avx2")))
static void rp_qgemm_finish_avx2(const rp_qgemm* g, int64_t m, int64_t n0, const uint32_t* sums,
                                 const uint32_t* colsum, const uint32_t* zb) {
  const uint32_t za = rp_qgemm_za(g, m);
  const __m256i a = _mm256_set1_epi32((int)za), r = _mm256_set1_epi32((int)g->rowsum[m]);
  const __m256i kza = _mm256_set1_epi32((int)((uint32_t)g->K * za));
  int32_t* out = g->out + m * g->N + n0;
  for (int c = 0; c < RP_QGEMM_COLUMNS; c += 8) {
    const __m256i s = _mm256_loadu_si256((const __m256i*)(sums + c));
    const __m256i b = _mm256_loadu_si256((const __m256i*)(zb + c));
    const __m256i cs = _mm256_loadu_si256((const __m256i*)(colsum + c));
    const __m256i lost = _mm256_add_epi32(_mm256_mullo_epi32(b, r), _mm256_mullo_epi32(a, cs));
    _mm256_storeu_si256((__m256i*)(out + c), _mm256_add_epi32(_mm256_sub_epi32(s, lost), _mm256_mullo_epi32(kza, b)));
  }
}

/* 32 bytes of row k of B' from column n0 on, zeros past N and K */
static void rp_qgemm_row(const rp_qgemm* g, int64_t k, int64_t n0, int64_t cols, uint8_t* row) {
  const uint8_t flip = g->b_signed ? 0 : 0x80;
  const uint8_t* src = g->B + k * g->N + n0;
  for (int64_t c = 0; c < RP_QGEMM_COLUMNS; c++) row[c] = k < g->K && c < cols ? (uint8_t)(src[c] ^ flip) : 0;
}

/* ----------------------------------------------------------------------------- packing */

/* the columns' sums of a packed panel, stored after its groups */
static void rp_qgemm_column_sums(const rp_qgemm* g, uint8_t* panel) {
  uint32_t sums[RP_QGEMM_COLUMNS] = {0};
  for (int64_t k = 0; k < g->Kp; k += 4)
    for (int c = 0; c < RP_QGEMM_COLUMNS; c++)
      for (int j = 0; j < 4; j++) sums[c] += (uint32_t)(int32_t)(int8_t)panel[k * RP_QGEMM_COLUMNS + 4 * c + j];
  memcpy(panel + g->Kp * RP_QGEMM_COLUMNS, sums, sizeof(sums));
}

/* the panel of columns n0 .. n0+cols of an unpacked B: rows k .. k+3 transposed 4 x 32 */
__attribute__((target("avx2")))
static void rp_qgemm_pack_avx2(const rp_qgemm* g, int64_t n0, int64_t cols, uint8_t* packed) {
  const __m256i flip = _mm256_set1_epi8(g->b_signed ? 0 : (char)0x80);
  uint8_t rows[4][RP_QGEMM_COLUMNS];
  for (int64_t k = 0; k < g->Kp; k += 4) {
    __m256i r[4];
    for (int j = 0; j < 4; j++) {
      if (cols == RP_QGEMM_COLUMNS && k + j < g->K) {
        r[j] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(g->B + (k + j) * g->N + n0)), flip);
      } else {
        rp_qgemm_row(g, k + j, n0, cols, rows[j]);
        r[j] = _mm256_loadu_si256((const __m256i*)rows[j]);
      }
    }
    /* columns 0-3 | 16-19 in u0, 4-7 | 20-23 in u1, 8-11 | 24-27 in u2, 12-15 | 28-31 in u3 */
    const __m256i t0 = _mm256_unpacklo_epi8(r[0], r[1]), t1 = _mm256_unpackhi_epi8(r[0], r[1]);
    const __m256i t2 = _mm256_unpacklo_epi8(r[2], r[3]), t3 = _mm256_unpackhi_epi8(r[2], r[3]);
    const __m256i u0 = _mm256_unpacklo_epi16(t0, t2), u1 = _mm256_unpackhi_epi16(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi16(t1, t3), u3 = _mm256_unpackhi_epi16(t1, t3);
    __m256i* dst = (__m256i*)(packed + k * RP_QGEMM_COLUMNS);
    _mm256_storeu_si256(dst, _mm256_permute2x128_si256(u0, u1, 0x20));
    _mm256_storeu_si256(dst + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
    _mm256_storeu_si256(dst + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
    _mm256_storeu_si256(dst + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
  }
}

static void rp_qgemm_pack_c(const rp_qgemm* g, int64_t n0, int64_t cols, uint8_t* packed) {
  uint8_t row[RP_QGEMM_COLUMNS];
  for (int64_t k = 0; k < g->Kp; k++) {
    rp_qgemm_row(g, k, n0, cols, row);
    for (int c = 0; c < RP_QGEMM_COLUMNS; c++) packed[(k / 4) * 128 + c * 4 + k % 4] = row[c];
  }
}

/* ----------------------------------------------------------------------------- AVX-512 VNNI */

/* ROWS rows of A' from row m over one panel: raw sums into sums[ROWS][32] */
#define RP_QGEMM_VNNI_TILE(ROWS)                                                                        \
  __attribute__((target("avx512f,avx512bw,avx512vnni")))                                             \
  static void rp_qgemm_tile_vnni_##ROWS(const rp_qgemm* g, int64_t m, const uint8_t* panel,           \
                                        uint32_t* sums) {                                              \
    __m512i acc[ROWS][2];                                                                              \
    _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_si512(); \
    for (int64_t k = 0; k < g->Kp; k += 4) {                                                           \
      const __m512i b0 = _mm512_loadu_si512(panel + k * RP_QGEMM_COLUMNS);                             \
      const __m512i b1 = _mm512_loadu_si512(panel + k * RP_QGEMM_COLUMNS + 64);                        \
      _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++) {                                         \
        int32_t quad;                                                                                  \
        memcpy(&quad, g->A + (m + r) * g->Kp + k, 4);                                                  \
        const __m512i a = _mm512_set1_epi32(quad);                                                     \
        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], a, b0);                                             \
        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], a, b1);                                             \
      }                                                                                                \
    }                                                                                                  \
    _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++) {                                           \
      _mm512_storeu_si512(sums + r * RP_QGEMM_COLUMNS, acc[r][0]);                                     \
      _mm512_storeu_si512(sums + r * RP_QGEMM_COLUMNS + 16, acc[r][1]);                                \
    }                                                                                                  \
  }
RP_QGEMM_VNNI_TILE(1)
RP_QGEMM_VNNI_TILE(2)
RP_QGEMM_VNNI_TILE(4)

/* ----------------------------------------------------------------------------- AMX */

/* AMX (Sapphire Rapids and later): TDPBUSD multiplies a tile of 16 rows x 64 k of A' by 16
   groups of four k of 16 columns of B' (half a panel's row of groups, which a tile load
   with a stride of 128 bytes reads in place), into 16 x 16 int32. Linux hands out the tile
   registers to a process that asks for them (arch_prctl ARCH_REQ_XCOMP_PERM). */
#define RP_ARCH_REQ_XCOMP_PERM 0x1023
#define RP_XFEATURE_XTILEDATA 18

/* -1: not asked yet, 0: no AMX here, 1: the tiles are this process's to use */
static int rp_qgemm_amx_state = -1;

static int rp_qgemm_amx_usable(void) {
  int state = __atomic_load_n(&rp_qgemm_amx_state, __ATOMIC_ACQUIRE);
  if (state < 0) {
    unsigned a, b, c, d;
    const int cpu = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1);
    state = cpu && syscall(SYS_arch_prctl, RP_ARCH_REQ_XCOMP_PERM, RP_XFEATURE_XTILEDATA) == 0;
    __atomic_store_n(&rp_qgemm_amx_state, state, __ATOMIC_RELEASE);
  }
  return state;
}

/* palette 1: tiles 0-3 the sums (16 rows x 16 int32), 4-5 A' (16 rows x 64 bytes), 6-7 B'
   (16 groups x 16 columns x 4 bytes) */
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} rp_tile_config;

/* a static object: GCC 12 drops stores into a local one that only LDTILECFG reads */
static const rp_tile_config rp_qgemm_tiles = {
  1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

__attribute__((target("amx-tile"))) static void rp_qgemm_amx_begin(void) { _tile_loadconfig(&rp_qgemm_tiles); }

__attribute__((target("amx-tile"))) static void rp_qgemm_amx_end(void) { _tile_release(); }

/* rows m .. m+32 of A' (m a multiple of 32) over one panel: raw sums into sums[32][32] */
__attribute__((target("amx-tile,amx-int8")))
static void rp_qgemm_tile_amx(const rp_qgemm* g, int64_t m, const uint8_t* panel, uint32_t* sums) {
  const int64_t tile = 16 * RP_QGEMM_DEPTH, steps = g->Kp / RP_QGEMM_DEPTH;
  const uint8_t* a = g->tiles + m / 16 * steps * tile;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t k = 0; k < g->Kp; k += RP_QGEMM_DEPTH) {
    _tile_loadd(4, a + k / RP_QGEMM_DEPTH * tile, RP_QGEMM_DEPTH);
    _tile_loadd(5, a + (steps + k / RP_QGEMM_DEPTH) * tile, RP_QGEMM_DEPTH);
    _tile_loadd(6, panel + k * RP_QGEMM_COLUMNS, 4 * RP_QGEMM_COLUMNS);
    _tile_loadd(7, panel + k * RP_QGEMM_COLUMNS + 64, 4 * RP_QGEMM_COLUMNS);
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 4, 7);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbusd(3, 5, 7);
  }
  const int stride = RP_QGEMM_COLUMNS * sizeof(uint32_t);
  _tile_stored(0, sums, stride);
  _tile_stored(1, sums + 16, stride);
  _tile_stored(2, sums + 16 * RP_QGEMM_COLUMNS, stride);
  _tile_stored(3, sums + 16 * RP_QGEMM_COLUMNS + 16, stride);
}

/* ----------------------------------------------------------------------------- AVX2 */

/* ROWS rows over one panel, 8 columns at a time: 16 bytes of the panel (4 columns x 4 k)
   widen to 16 int16, VPMADDWD with the row's four k (int16, from A16, repeated) gives each
   column's two pair sums in adjacent int32 lanes, added at the end */
#define RP_QGEMM_AVX2_TILE(ROWS)                                                                        \
  __attribute__((target("avx2")))                                                                      \
  static void rp_qgemm_tile_avx2_##ROWS(const rp_qgemm* g, int64_t m, const uint8_t* panel,           \
                                        uint32_t* sums) {                                              \
    for (int q = 0; q < 4; q++) {                                                                      \
      __m256i acc[ROWS][2];                                                                            \
      _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256(); \
      for (int64_t k = 0; k < g->Kp; k += 4) {                                                         \
        const uint8_t* bk = panel + k * RP_QGEMM_COLUMNS + 32 * q;                                     \
        const __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)bk));                 \
        const __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(bk + 16)));          \
        _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++) {                                       \
          int64_t four;                                                                                \
          memcpy(&four, g->A16 + (m + r) * g->Kp + k, 8);                                              \
          const __m256i a = _mm256_set1_epi64x(four);                                                  \
          acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(a, b0));                           \
          acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(a, b1));                           \
        }                                                                                              \
      }                                                                                                \
      for (int r = 0; r < ROWS; r++) {                                                                 \
        uint32_t pairs[16];                                                                            \
        _mm256_storeu_si256((__m256i*)pairs, acc[r][0]);                                               \
        _mm256_storeu_si256((__m256i*)(pairs + 8), acc[r][1]);                                         \
        for (int c = 0; c < 8; c++) sums[r * RP_QGEMM_COLUMNS + 8 * q + c] = pairs[2 * c] + pairs[2 * c + 1]; \
      }                                                                                                \
    }                                                                                                  \
  }
RP_QGEMM_AVX2_TILE(1)
RP_QGEMM_AVX2_TILE(4)

/* ----------------------------------------------------------------------------- portable */

static void rp_qgemm_tile_c(const rp_qgemm* g, int64_t m, const uint8_t* panel, uint32_t* sums) {
  const uint8_t* a = g->A + m * g->Kp;
  memset(sums, 0, RP_QGEMM_COLUMNS * sizeof(uint32_t));
  for (int64_t k = 0; k < g->Kp; k += 4)
    for (int c = 0; c < RP_QGEMM_COLUMNS; c++)
      for (int j = 0; j < 4; j++)
        sums[c] += (uint32_t)a[k + j] * (uint32_t)(int32_t)(int8_t)panel[k * RP_QGEMM_COLUMNS + 4 * c + j];
}

/* ----------------------------------------------------------------------------- driver */

/* rows m .. of A' over the panel: the body's widest tile that fits; the rows it took */
static int rp_qgemm_rows(const rp_qgemm* g, int body, int64_t m, const uint8_t* panel, uint32_t* sums) {
  const int64_t left = g->M - m;
  if (body == 3 && left >= 16) return rp_qgemm_tile_amx(g, m, panel, sums), RP_QGEMM_AMX_ROWS;
  if (body >= 2) {
    if (left >= 4) return rp_qgemm_tile_vnni_4(g, m, panel, sums), 4;
    if (left >= 2) return rp_qgemm_tile_vnni_2(g, m, panel, sums), 2;
    return rp_qgemm_tile_vnni_1(g, m, panel, sums), 1;
  }
  if (body == 1) {
    if (left >= 4) return rp_qgemm_tile_avx2_4(g, m, panel, sums), 4;
    return rp_qgemm_tile_avx2_1(g, m, panel, sums), 1;
  }
  return rp_qgemm_tile_c(g, m, panel, sums), 1;
}

static int rp_qgemm_panels(void* ctx, int64_t begin, int64_t end) {
  const rp_qgemm* g = (const rp_qgemm*)ctx;
  const int body = g->body;
  uint8_t* packed = g->b_packed ? 0 : (uint8_t*)malloc((size_t)RP_QGEMM_PANEL(g->Kp));
  if (!g->b_packed && !packed) return -1;
  if (body == 3) rp_qgemm_amx_begin();
  uint32_t sums[RP_QGEMM_AMX_ROWS * RP_QGEMM_COLUMNS], colsum[RP_QGEMM_COLUMNS], zb[RP_QGEMM_COLUMNS];
  for (int64_t t = begin; t < end; t++) {
    const int64_t n0 = t * RP_QGEMM_COLUMNS;
    const int64_t cols = g->N - n0 < RP_QGEMM_COLUMNS ? g->N - n0 : RP_QGEMM_COLUMNS;
    const uint8_t* panel = g->B + t * RP_QGEMM_PANEL(g->Kp);
    if (!g->b_packed) {
      if (body >= 1) rp_qgemm_pack_avx2(g, n0, cols, packed);
      else rp_qgemm_pack_c(g, n0, cols, packed);
      rp_qgemm_column_sums(g, packed);
      panel = packed;
    }
    memcpy(colsum, panel + g->Kp * RP_QGEMM_COLUMNS, sizeof(colsum));
    for (int64_t c = 0; c < cols; c++) zb[c] = rp_qgemm_zb(g, n0 + c);
    for (int64_t m = 0; m < g->M;) {
      const int rows = rp_qgemm_rows(g, body, m, panel, sums);
      for (int r = 0; r < rows && m + r < g->M; r++) {
        if (body >= 1 && cols == RP_QGEMM_COLUMNS)
          rp_qgemm_finish_avx2(g, m + r, n0, sums + r * RP_QGEMM_COLUMNS, colsum, zb);
        else
          rp_qgemm_finish(g, m + r, n0, cols, sums + r * RP_QGEMM_COLUMNS, colsum, zb);
      }
      m += rows;
    }
  }
  if (body == 3) rp_qgemm_amx_end();
  free(packed);
  return 0;
}

/* A [M, K] int8 (a_signed 1) or uint8, row-major; B int8 (b_signed 1) or uint8: panels of
   B' and its columns' sums (b_packed 1: passinfra/ir/op/qgemm_panels.py), or [K, N]
   row-major; za one value or one per row (za_step 0 or 1), zb one value or one per column
   (zb_step 0 or 1), of their operand's type; out [M, N] int32. Returns 0, or -1 when a
   buffer cannot be allocated. */
int rp_qgemm_i8(const void* A, const void* B, const void* za, const void* zb, int32_t* out, int64_t M,
                int64_t N, int64_t K, int64_t a_signed, int64_t b_signed, int64_t za_step, int64_t zb_step,
                int64_t b_packed) {
  if (M <= 0 || N <= 0) return 0;
  const int64_t Kp = (K + RP_QGEMM_DEPTH - 1) / RP_QGEMM_DEPTH * RP_QGEMM_DEPTH;
  uint8_t* Au = (uint8_t*)malloc((size_t)(M * Kp));
  uint32_t* rowsum = (uint32_t*)malloc((size_t)M * sizeof(uint32_t));
  __builtin_cpu_init();
  const int level = raypass_conv_isa(-1);  /* the level in effect (detected once) */
  const int vnni = level == 2 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  const int amx = vnni && M >= 16 && rp_qgemm_amx_usable();
  const int body = amx ? 3 : vnni ? 2 : level >= 1 ? 1 : 0;
  /* AMX: whole steps of rows, zeros past M */
  const int64_t tile_rows = (M + RP_QGEMM_AMX_ROWS - 1) / RP_QGEMM_AMX_ROWS * RP_QGEMM_AMX_ROWS;
  uint8_t* tiles = amx ? (uint8_t*)calloc((size_t)(tile_rows * Kp), 1) : 0;
  const int wide = body == 1;
  int16_t* A16 = wide ? (int16_t*)malloc((size_t)(M * Kp) * sizeof(int16_t)) : 0;
  if (!Au || !rowsum || (amx && !tiles) || (wide && !A16)) {
    free(Au), free(rowsum), free(tiles), free(A16);
    return -1;
  }
  const uint8_t flip = a_signed ? 0x80 : 0;
  for (int64_t m = 0; m < M; m++) {
    const uint8_t* src = (const uint8_t*)A + m * K;
    uint8_t* dst = Au + m * Kp;
    uint32_t s = 0;
    for (int64_t k = 0; k < K; k++) s += dst[k] = (uint8_t)(src[k] ^ flip);
    memset(dst + K, 0, (size_t)(Kp - K));
    rowsum[m] = s;
    for (int64_t k = 0; wide && k < Kp; k++) A16[m * Kp + k] = dst[k];
    for (int64_t k = 0; amx && k < Kp; k += RP_QGEMM_DEPTH)
      memcpy(tiles + ((m / 16 * (Kp / RP_QGEMM_DEPTH) + k / RP_QGEMM_DEPTH) * 16 + m % 16) * RP_QGEMM_DEPTH,
             dst + k, RP_QGEMM_DEPTH);
  }
  rp_qgemm g = {Au, rowsum, A16, tiles, (const uint8_t*)B, za, zb, out, M, N, K, Kp, za_step, zb_step,
                (int)a_signed, (int)b_signed, (int)b_packed, body};
  const int64_t panels = (N + RP_QGEMM_COLUMNS - 1) / RP_QGEMM_COLUMNS;
  /* a panel is M * K * 32 multiply-adds */
  int status = rp_parallel_for(rp_qgemm_panels, &g, panels, M * K * RP_QGEMM_COLUMNS / RP_MACS_PER_WORK + 1);
  free(Au), free(rowsum), free(tiles), free(A16);
  return status < 0 ? -1 : 0;
}
