/* raypass runtime: integer matrix product of 8-bit operands (qnn.matmul; see
   passinfra/codegen/compute/quantize.py). Appended to conv_runtime.c: one runtime object,
   one compile, one instruction-set choice (raypass_conv_isa); it also compiles on its own.

   out[m, n] = sum over k of (A[m, k] - za[m]) * (B[k, n] - zb[n]) in int32, exactly: the
   wrapped int32 of the exact sum, as the reference (int64, then cast) computes it.

   Every body computes on an unsigned A' and a signed B' (u8 x s8, the operand types of
   VPDPBUSD): A' = A ^ 0x80 when A is int8 (A' = A + 128, so za' = za + 128), B' = B ^ 0x80
   when B is uint8 (B' = B - 128, zb' = zb - 128), and

     sum (A - za)(B - zb) = S - zb' * rowsum(A') - za' * colsum(B') + K * za' * zb'

   with S = sum A' * B' (the columns' sums of B' are stored with the weight). Each term is
   an integer computed exactly modulo 2^32 (uint32 arithmetic), so the result does not
   depend on the order of the sums: the AMX, AVX-512 VNNI, AVX-VNNI, direct, AVX2 and
   portable bodies and any thread count give the same bits. No step saturates: TDPBUSD
   and VPDPBUSD add their u8 x s8 products in 32 bits, and the AVX2 body widens to 16
   bits and uses VPMADDWD (a pair of products of at most 255 * 128 each fits in int32),
   where onnxruntime's AVX2 kernel uses VPMADDUBSW, whose 16-bit pair sums can saturate.
   Unless b_signed is 2 (the op's saturate_pairs: a uint8 A, an int8 B): then the sum is of
   the pairs k = 2j, 2j + 1 of raw products, each saturated to int16, as VPMADDUBSW adds
   them, on every CPU (a weight whose pairs do not all fit runs on the VPMADDUBSW bodies or
   the portable one, never on VNNI or AMX, which do not saturate). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <sys/syscall.h>

/* glibc declares it only with _DEFAULT_SOURCE, which -std=c11 leaves out */
extern long syscall(long number, ...);

#if !defined(RP_MACS_PER_WORK)
#error "the tunables come from passinfra/codegen/conv_runtime.py (runtime_defines), or -D on the command line"
#endif

extern int raypass_conv_isa(int level);
extern int rp_isa_capped(void);
typedef int (*rp_chunk_fn)(void* ctx, int64_t begin, int64_t end);
extern int rp_parallel_for(rp_chunk_fn fn, void* ctx, int64_t extent, int64_t work_per_iteration);

/* output columns per panel (COLUMNS in passinfra/ir/op/qgemm_panels.py): B' is read in
   panels of [K4 / 4][W columns][4 k] signed bytes (K4: K rounded up to 4, zeros past K)
   and then the W columns' sums (int32) and W * 4 bytes of flags (the first: every pair of the
   weight fits 16 bits, body 7; packed here: unset, not read),
   W 32 (16 for a narrow GEMM, below), stored so at compile time for a constant weight
   (qgemm_panels), else packed here, one panel at a time; a body's raw sums are rows of 32 */
#define RP_QGEMM_COLUMNS 32
/* a GEMM (a group) of at most this many columns has panels of this many (NARROW_COLUMNS in
   qgemm_panels.py): a grouped convolution's 16 outputs a group would leave half of a wide
   panel zeros. A panel's width (rp_qgemm.width) is rp_qgemm_width(N), on both sides */
#define RP_QGEMM_NARROW 16
/* k a panel holds is a multiple of this (zeros past K): whole AMX tiles of 64 bytes a row */
#define RP_QGEMM_DEPTH 64
/* A' rows of the other bodies are whole vectors of this many k (widened or flipped whole) */
#define RP_QGEMM_VECTOR 16
/* the bytes of a panel of K4 k and W columns: its groups of four k, the columns' sums, the flags */
#define RP_QGEMM_PANEL(K4, W) ((K4) * (W) + (W) * 8)

static int64_t rp_qgemm_width(int64_t n) { return n <= RP_QGEMM_NARROW ? RP_QGEMM_NARROW : RP_QGEMM_COLUMNS; }
/* AMX: the first step of rows over a panel streams it from memory, asking for its bytes
   this many k ahead (a decoder's 32-row projections are reads of their weights: 2.9 ->
   2.75 ms on one thread for a layer's seven; 128-512 alike, 1024 slower) */
#define RP_QGEMM_PREFETCH 256
/* rows of A' per AMX step (two tiles of 16); A' is allocated in whole steps */
#define RP_QGEMM_AMX_ROWS 32

/* a convolution whose im2col matrix is A (rp_qconv_i8): NHWC image, HWIO weight */
typedef struct {
  int64_t height, width, channels, out_height, out_width, kh, kw, sh, sw, dh, dw, top, left;
} rp_qgemm_image;

typedef struct {
  const uint8_t* A;        /* [M, Kp]: A' (unsigned), zeros past K; not made for AMX */
  const uint32_t* rowsum;  /* [M] sum over k of each row of A' */
  const int16_t* A16;      /* AVX2 only: A' as int16, [M, Kp] */
  const uint8_t* tiles;    /* AMX only: A' in tiles, [M / 16][Kp / 64][16][64], zero rows past M
                              (a tile load reads 1 KiB in a row, not 16 rows Kp apart) */
  const uint8_t* B;        /* panels of B' (b_packed), or B [K, N] as given */
  void* packed;            /* where B as given is packed (rp_qgemm_pack_panels) */
  const void* za;          /* A's zero point(s): one, or one per row (za_step 1) */
  const void* zb;          /* B's zero point(s): one, or one per column (zb_step 1) */
  int32_t* out;            /* [M, N], rows ld apart (out_type 0) */
  /* the requantizing epilogue (out_type 1: uint8, 2: int8 into qout): qnn.requantize of out
     plus the bias, saturate(rne(float(out + bias[n]) * multiplier[n]) + zero) */
  const int32_t* bias;     /* one (bias_kind 1) or one per column (2); 0: none */
  const float* multiplier; /* one, or one per column (multiplier_step 1) */
  void* qout;              /* [M, N] bytes, rows ld apart */
  int64_t bias_kind, multiplier_step;
  int32_t out_zero;
  int out_type;
  int64_t M, N, K, Kp, za_step, zb_step;
  int64_t ld;              /* row stride of out and of B as given: N times the groups */
  int64_t groups;          /* GEMMs of one call (a grouped convolution's), see rp_qgemm_i8 */
  int64_t width;           /* the panels' columns: rp_qgemm_width(N) */
  /* which rows of A' the buffers A, A16 and tiles hold: every group's (a_first 0, the groups
     a_group_rows = M rows apart, their tiles tile_group_rows, M in whole steps), or one row
     block's from row a_first of one group (both 0: a work item's own, rp_qgemm_row_blocks) */
  int64_t a_first, a_group_rows, tile_group_rows;
  int a_signed, b_signed, b_packed;
  int body;                /* 8: direct by VPMADDUBSW, 7: AVX2 by VPMADDUBSW (a weight whose pairs
                              fit 16 bits), 6: direct on AVX-VNNI, 5: AVX-VNNI (256-bit VPDPBUSD,
                              no AVX-512), 4: direct (rp_qgemm_tile_direct), 3: AMX (blocks of 16
                              rows or more; fewer on VNNI), 2: AVX-512 VNNI, 1: AVX2 widening to 16
                              bits, 0: portable */
  int64_t K4;              /* K rounded up to 4: the k of a panel (A' holds Kp, whole AMX steps) */
  /* body 4: a convolution's A' read from its image in place, no im2col */
  const rp_qgemm_image* image;
  const uint8_t* data;     /* the image at the group's first channel (rp_qgemm_group) */
  const uint8_t* pad_row;  /* the image's zero point, a group's channels of it: a tap in the padding */
  uint8_t flip;            /* 0x80 for an int8 image (A' = A ^ 0x80) */
  /* AMX reading A in place (a uint8 A, so A' is A, with K whole steps of 64 and no row
     sums to make: a pointwise convolution's data): its rows below rows_full (whole steps of
     32), tile loads K bytes apart; the last partial step comes from the tiles as made */
  const uint8_t* rows;
  int64_t rows_full;
  /* the row stride of A' the VPMADDUBSW tiles read: Kp where A' is made, K where A is read
     in place (`in_place`: a uint8 A of whole groups of four k, no row sums, one group, not
     an image: A' is A, and a row's last group of four ends at K) */
  int64_t a_stride;
  int in_place;
  int64_t block_rows;      /* rows of a work item's block (rp_qgemm_block_rows) */
  /* a residual add after the requantization (rp_qgemm_add_i8): qnn.add of the requantized
     values and `residual` (laid out as qout, of its type), QLinearAdd's arithmetic in
     float32: (fixed + lhs * add_lhs) + rhs * add_rhs, the residual qnn.add's lhs where
     residual_first; 0: none */
  const void* residual;
  float add_lhs, add_rhs, add_fixed;
  int residual_first;
  int stream;              /* the weight's panels are RP_QGEMM_STREAM_BYTES or more: streamed */
  /* a table the outputs are looked up in last (the op's lookup table: an element-wise
     function of the 8-bit output): its 256 values of the output's type, from the type's
     lowest; 0: none */
  const uint8_t* lut;
  const uint8_t* lut_rows; /* the same for VPSHUFB, where there is one: rp_qgemm_lookup32 */
  int vbmi;                /* the AVX-512 bodies' finish looks a table up by VBMI */
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

/* whether every zb' of `count` zero points is 0 (a symmetric weight: int8 of zero point 0,
   uint8 of 128), so no value reads a row's sum */
static int rp_qgemm_centered(const void* zb, int b_signed, int64_t count) {
  for (int64_t i = 0; i < count; i++)
    if ((b_signed ? ((const int8_t*)zb)[i] : (int)((const uint8_t*)zb)[i] - 128) != 0) return 0;
  return 1;
}

/* the epilogue of one value (the sum plus the bias): qnn.requantize's operations, in its order
   (passinfra/codegen/compute/quantize.py: round_saturate), so the bits are the loop
   nest's: the int32 sum wraps, the product rounds once, nearbyint rounds half to even */
static int32_t rp_qgemm_requantize_value(const rp_qgemm* g, float multiplier, uint32_t acc) {
  const float value = (float)(int32_t)acc * multiplier;
  const int32_t qmin = g->out_type == 1 ? 0 : -128, qmax = g->out_type == 1 ? 255 : 127;
  const float low = (float)(qmin - g->out_zero), high = (float)(qmax - g->out_zero);
  const float rounded = nearbyintf(value);
  const float clamped = rounded > low ? (rounded < high ? rounded : high) : low;  /* NaN: low */
  return (int32_t)clamped + g->out_zero;
}

/* the same of column n's sum (its bias added here) */
static int32_t rp_qgemm_requantize(const rp_qgemm* g, int64_t n, uint32_t acc) {
  if (g->bias_kind) acc += (uint32_t)g->bias[g->bias_kind == 2 ? n : 0];
  return rp_qgemm_requantize_value(g, g->multiplier[n * g->multiplier_step], acc);
}

/* a requantized value q plus the residual's element at `at`, where there is a residual:
   qnn.add's operations in its order (passinfra/codegen/compute/quantize.py), rounded and
   saturated to the output's type */
static int32_t rp_qgemm_added(const rp_qgemm* g, int32_t q, int64_t at) {
  if (!g->residual) return q;
  const int32_t r = g->out_type == 1 ? ((const uint8_t*)g->residual)[at] : ((const int8_t*)g->residual)[at];
  const float lhs = (float)(g->residual_first ? r : q), rhs = (float)(g->residual_first ? q : r);
  const float total = (g->add_fixed + lhs * g->add_lhs) + rhs * g->add_rhs;
  const float low = g->out_type == 1 ? 0.0f : -128.0f, high = g->out_type == 1 ? 255.0f : 127.0f;
  const float rounded = nearbyintf(total);
  return (int32_t)(rounded > low ? (rounded < high ? rounded : high) : low);  /* NaN: low */
}

/* the value stored of a requantized q at `at`: the residual added, then looked up */
static int32_t rp_qgemm_output(const rp_qgemm* g, int32_t q, int64_t at) {
  const int32_t value = rp_qgemm_added(g, q, at);
  if (!g->lut) return value;
  return g->out_type == 1 ? g->lut[value] : (int32_t)(int8_t)g->lut[value + 128];
}

/* out[m, n0 .. n0+cols) from its raw sums S, the columns' sums of B' and their zb' */
static void rp_qgemm_finish(const rp_qgemm* g, int64_t m, int64_t n0, int64_t cols, const uint32_t* sums,
                            const uint32_t* colsum, const uint32_t* zb) {
  const uint32_t za = rp_qgemm_za(g, m), ra = g->rowsum[m], k = (uint32_t)g->K;
  for (int64_t c = 0; c < cols; c++) {
    const uint32_t value = sums[c] - zb[c] * ra - za * colsum[c] + k * za * zb[c];
    const int64_t at = m * g->ld + n0 + c;
    if (g->out_type == 0) g->out[at] = (int32_t)value;
    else ((uint8_t*)g->qout)[at] = (uint8_t)rp_qgemm_output(g, rp_qgemm_requantize(g, n0 + c, value), at);
  }
}

/* what the finish step of one panel's columns needs, computed once per work item: with
   one za for all rows (za_step 0), za' * colsum - K * za' * zb' (and the bias, requantizing)
   is one constant a column, `fixed`, so a value is S - zb' * rowsum - fixed, and with every
   zb' of the columns 0 (a symmetric weight: `centered`) S - fixed */
typedef struct {
  uint32_t fixed[RP_QGEMM_COLUMNS], zb[RP_QGEMM_COLUMNS], colsum[RP_QGEMM_COLUMNS];
  float scale[RP_QGEMM_COLUMNS];
  int64_t n0, cols;
  float low, high;  /* the rounded value's range: the output type's less the zero point */
  int centered;
} rp_qgemm_columns;

static void rp_qgemm_columns_of(const rp_qgemm* g, int64_t n0, int64_t cols, const uint8_t* panel,
                                rp_qgemm_columns* c) {
  memset(c->colsum, 0, sizeof(c->colsum));
  memcpy(c->colsum, panel + g->K4 * g->width, (size_t)g->width * sizeof(uint32_t));
  const uint32_t za = rp_qgemm_za(g, 0), k = (uint32_t)g->K;
  c->n0 = n0, c->cols = cols, c->centered = 1;
  for (int64_t i = 0; i < RP_QGEMM_COLUMNS; i++) {
    const int valid = i < cols;
    c->zb[i] = valid ? rp_qgemm_zb(g, n0 + i) : 0;
    c->fixed[i] = za * c->colsum[i] - k * za * c->zb[i];
    if (valid && g->out_type && g->bias_kind) c->fixed[i] -= (uint32_t)g->bias[g->bias_kind == 2 ? n0 + i : 0];
    c->scale[i] = valid && g->out_type ? g->multiplier[(n0 + i) * g->multiplier_step] : 0.0f;
    c->centered &= c->zb[i] == 0;
  }
  const int32_t qmin = g->out_type == 1 ? 0 : -128, qmax = g->out_type == 1 ? 255 : 127;
  c->low = (float)(qmin - g->out_zero), c->high = (float)(qmax - g->out_zero);
}

/* rows [m, m + rows) of the columns from their raw sums (rows RP_QGEMM_COLUMNS apart), 8 at
   a time. Requantizing: the float value clamped to [low, high] (MAXPS returns its second
   operand when one is NaN: NaN becomes low, as rp_qgemm_requantize has it; the bounds are
   integers, so clamping before rounding is clamping after), rounded by CVTPS2DQ in the
   current rounding mode (nearbyintf's), plus the zero point: in range, so the saturating
   packs change nothing */
/* vector v (8 columns) of a row's values: its raw sums less the columns' constants (and,
   a weight not centered, zb' times the row's sum) */
static inline __attribute__((target("avx2"), always_inline)) __m256i rp_qgemm_values8(
    const rp_qgemm_columns* c, const uint32_t* sums, int64_t v, __m256i ra) {
  const __m256i value = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i*)(sums + 8 * v)),
                                         _mm256_loadu_si256((const __m256i*)(c->fixed + 8 * v)));
  if (c->centered) return value;
  return _mm256_sub_epi32(value, _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i*)(c->zb + 8 * v)), ra));
}

/* those values requantized: scaled, clamped to [low, high], rounded, plus the zero point */
static inline __attribute__((target("avx2"), always_inline)) __m256i rp_qgemm_requantize8(
    const rp_qgemm_columns* c, __m256i value, int64_t v, __m256 low, __m256 high, __m256i zero) {
  const __m256 scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(value), _mm256_loadu_ps(c->scale + 8 * v));
  return _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(scaled, low), high)), zero);
}

/* 8 requantized values q plus the residual's 8 at `residual` (rp_qgemm_added's operations) */
static inline __attribute__((target("avx2"), always_inline)) __m256i rp_qgemm_added8(
    const rp_qgemm* g, __m256i q, const void* residual, __m256 low, __m256 high) {
  const __m128i bytes = _mm_loadl_epi64((const __m128i*)residual);
  const __m256i r = g->out_type == 1 ? _mm256_cvtepu8_epi32(bytes) : _mm256_cvtepi8_epi32(bytes);
  const __m256 qf = _mm256_cvtepi32_ps(q), rf = _mm256_cvtepi32_ps(r);
  const __m256 lhs = g->residual_first ? rf : qf, rhs = g->residual_first ? qf : rf;
  const __m256 total = _mm256_add_ps(_mm256_add_ps(_mm256_set1_ps(g->add_fixed),
                                                   _mm256_mul_ps(lhs, _mm256_set1_ps(g->add_lhs))),
                                     _mm256_mul_ps(rhs, _mm256_set1_ps(g->add_rhs)));
  return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(total, low), high));
}

/* The table's rows for VPSHUFB (RP_QGEMM_LUT_ROWS of 32 bytes, each 16 values twice): row
   r holds T[16r .. 16r + 15] XOR the row before it, except rows 0 and 8. Then, for an index
   x below 128, XOR over k <= x / 16 of row k at x % 16 is T[x]: VPSHUFB of row k indexed by
   x - 16k gives that for k <= x / 16 and 0 (the index's top bit set) for the others;
   likewise rows 8-15 for x - 128 (rp_qgemm_lookup32) */
#define RP_QGEMM_LUT_ROWS 16
static void rp_qgemm_lut_rows(const uint8_t* table, uint8_t* rows) {
  for (int r = 0; r < RP_QGEMM_LUT_ROWS; r++)
    for (int i = 0; i < 32; i++) {
      const int j = i % 16;
      rows[32 * r + i] = (uint8_t)(table[16 * r + j] ^ (r % 8 ? table[16 * (r - 1) + j] : 0));
    }
}

/* 32 indices' values in the table (rp_qgemm_output's last step): sixteen VPSHUFB of its
   rows. MobileNetV3-like's first layer (200704 values, one thread, Zen 3): this is
   0.17 ns a value alone where VPGATHERDD of 8 values from the table as int32 is 0.44 */
static inline __attribute__((target("avx2"), always_inline)) __m256i rp_lookup32(const uint8_t* lut_rows,
                                                                                __m256i x) {
  const __m256i top = _mm256_set1_epi8((char)0x80), sixteen = _mm256_set1_epi8(16);
  const __m256i upper = _mm256_cmpgt_epi8(_mm256_setzero_si256(), x);          /* x >= 128 */
  /* the index into rows 0-7 (0xFF, every row's 0, where x >= 128) and into rows 8-15 */
  __m256i lower_index = _mm256_or_si256(x, upper);
  __m256i upper_index = _mm256_or_si256(_mm256_xor_si256(x, top), _mm256_xor_si256(upper, _mm256_set1_epi8(-1)));
  const __m256i* rows = (const __m256i*)lut_rows;
  __m256i result = _mm256_setzero_si256();
  for (int k = 0; k < RP_QGEMM_LUT_ROWS / 2; k++) {
    result = _mm256_xor_si256(result, _mm256_shuffle_epi8(_mm256_loadu_si256(rows + k), lower_index));
    result = _mm256_xor_si256(result, _mm256_shuffle_epi8(_mm256_loadu_si256(rows + 8 + k), upper_index));
    lower_index = _mm256_sub_epi8(lower_index, sixteen);
    upper_index = _mm256_sub_epi8(upper_index, sixteen);
  }
  return result;
}

/* the same of 32 output bytes of `g` (an int8 value's index: value + 128) */
static inline __attribute__((target("avx2"), always_inline)) __m256i rp_qgemm_lookup32(const rp_qgemm* g,
                                                                                      __m256i bytes) {
  return rp_lookup32(g->lut_rows, g->out_type == 1 ? bytes : _mm256_xor_si256(bytes, _mm256_set1_epi8((char)0x80)));
}

/* rp_qgemm_lookup32 by AVX-512 VBMI: the table is four vectors, VPERMI2B looks each index
   up in the two halves (its low 7 bits) and its top bit picks one; 4 instructions where
   the rows take 48 (the same bytes: a lookup) */
static inline __attribute__((target("avx2,avx512f,avx512bw,avx512vbmi"), always_inline)) __m256i
rp_qgemm_lookup32_vbmi(const rp_qgemm* g, __m256i bytes) {
  const __m512i x = _mm512_castsi256_si512(g->out_type == 1 ? bytes : _mm256_xor_si256(bytes, _mm256_set1_epi8((char)0x80)));
  const __m512i* table = (const __m512i*)g->lut;
  const __m512i low = _mm512_permutex2var_epi8(_mm512_loadu_si512(table), x, _mm512_loadu_si512(table + 1));
  const __m512i high = _mm512_permutex2var_epi8(_mm512_loadu_si512(table + 2), x, _mm512_loadu_si512(table + 3));
  return _mm512_castsi512_si256(_mm512_mask_blend_epi8(_mm512_movepi8_mask(x), low, high));
}

/* vector v of a row's values: requantized, the residual added */
static inline __attribute__((target("avx2"), always_inline)) __m256i rp_qgemm_stored8(
    const rp_qgemm* g, const rp_qgemm_columns* c, const uint32_t* sums, int64_t v, __m256i ra, __m256 low,
    __m256 high, __m256i zero, const uint8_t* rrow, __m256 add_low, __m256 add_high, const int add) {
  __m256i q = rp_qgemm_requantize8(c, rp_qgemm_values8(c, sums, v, ra), v, low, high, zero);
  return add ? rp_qgemm_added8(g, q, rrow + 8 * v, add_low, add_high) : q;
}

/* rp_qgemm_finish_avx2's rows, `add` whether there is a residual and `lut` a table (constants
   where it is inlined: the loops without them stay as they were) */
static inline __attribute__((target("avx2"), always_inline)) void rp_qgemm_finish_rows_avx2(
    const rp_qgemm* g, int64_t m, int64_t rows, const rp_qgemm_columns* c, const uint32_t* sums,
    const int add, const int lut) {
  if (g->za_step) {  /* one za a row: each row its own constants */
    for (int64_t r = 0; r < rows; r++)
      rp_qgemm_finish(g, m + r, c->n0, c->cols, sums + r * RP_QGEMM_COLUMNS, c->colsum, c->zb);
    return;
  }
  const int64_t vectors = c->cols / 8;
  const int quantize = g->out_type != 0;
  const __m256 low = _mm256_set1_ps(c->low), high = _mm256_set1_ps(c->high);
  const __m256i zero = _mm256_set1_epi32(g->out_zero);
  /* the dwords of 32 bytes packed from four vectors a, b, c, d (PACKSSDW and PACKUSWB
     work within 128-bit lanes: a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7), in order */
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  /* the sum's range (a residual add's output: the type's, no zero point) */
  const __m256 add_low = _mm256_set1_ps(g->out_type == 1 ? 0.0f : -128.0f);
  const __m256 add_high = _mm256_set1_ps(g->out_type == 1 ? 255.0f : 127.0f);
  uint8_t* pending = 0;  /* a row of 16 columns whose bytes wait to be looked up with the next's */
  __m128i pending_bytes = _mm_setzero_si128();
  uint8_t looked[32] = {0};  /* a row's vectors of fewer than 32 columns before their lookup */
  for (int64_t r = 0; r < rows; r++, sums += RP_QGEMM_COLUMNS) {
    const __m256i ra = _mm256_set1_epi32((int)g->rowsum[m + r]);
    const int64_t at = (m + r) * g->ld + c->n0;
    uint8_t* qrow = (uint8_t*)g->qout + at;
    const uint8_t* rrow = add ? (const uint8_t*)g->residual + at : 0;
    int32_t* row = g->out + at;
    if (quantize && (vectors == 4 || (vectors == 2 && c->cols == 16))) {
      /* a whole panel's 32 (16) columns: packed and stored at once */
#define RP_QGEMM_Q8(v) rp_qgemm_stored8(g, c, sums, v, ra, low, high, zero, rrow, add_low, add_high, add)
      const __m256i q0 = RP_QGEMM_Q8(0), q1 = RP_QGEMM_Q8(1);
      /* 16 columns: their two vectors packed twice, stored once */
      const __m256i q2 = vectors == 4 ? RP_QGEMM_Q8(2) : q0, q3 = vectors == 4 ? RP_QGEMM_Q8(3) : q1;
#undef RP_QGEMM_Q8
      const __m256i w0 = _mm256_packs_epi32(q0, q1), w1 = _mm256_packs_epi32(q2, q3);
      const __m256i bytes = g->out_type == 1 ? _mm256_packus_epi16(w0, w1) : _mm256_packs_epi16(w0, w1);
      __m256i ordered = _mm256_permutevar8x32_epi32(bytes, order);
      if (lut && vectors == 2) {  /* 16 columns: two rows' bytes looked up at once */
        if (!pending) {
          pending = qrow, pending_bytes = _mm256_castsi256_si128(ordered);
          continue;
        }
        const __m256i both = rp_qgemm_lookup32(g, _mm256_set_m128i(_mm256_castsi256_si128(ordered), pending_bytes));
        _mm_storeu_si128((__m128i*)pending, _mm256_castsi256_si128(both));
        _mm_storeu_si128((__m128i*)qrow, _mm256_extracti128_si256(both, 1));
        pending = 0;
        continue;
      }
      if (lut) ordered = rp_qgemm_lookup32(g, ordered);
      if (vectors == 4) _mm256_storeu_si256((__m256i*)qrow, ordered);
      else _mm_storeu_si128((__m128i*)qrow, _mm256_castsi256_si128(ordered));
      continue;
    }
    for (int64_t v = 0; v < vectors; v++) {
      const __m256i value = rp_qgemm_values8(c, sums, v, ra);
      if (!quantize) {
        _mm256_storeu_si256((__m256i*)(row + 8 * v), value);
        continue;
      }
      __m256i q = rp_qgemm_requantize8(c, value, v, low, high, zero);
      if (add) q = rp_qgemm_added8(g, q, rrow + 8 * v, add_low, add_high);
      const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      const __m128i bytes = g->out_type == 1 ? _mm_packus_epi16(words, words) : _mm_packs_epi16(words, words);
      _mm_storel_epi64((__m128i*)((lut ? looked : qrow) + 8 * v), bytes);
    }
    if (lut && vectors) {  /* the row's vectors looked up at once */
      _mm256_storeu_si256((__m256i*)looked, rp_qgemm_lookup32(g, _mm256_loadu_si256((const __m256i*)looked)));
      memcpy(qrow, looked, (size_t)(8 * vectors));
    }
    for (int64_t i = 8 * vectors; i < c->cols; i++) {
      const uint32_t value = sums[i] - c->zb[i] * g->rowsum[m + r] - c->fixed[i];
      if (!quantize) row[i] = (int32_t)value;
      else qrow[i] = (uint8_t)rp_qgemm_output(g, rp_qgemm_requantize_value(g, c->scale[i], value), at + i);
    }
  }
  if (pending)
    _mm_storeu_si128((__m128i*)pending,
                     _mm256_castsi256_si128(rp_qgemm_lookup32(g, _mm256_set_m128i(_mm_setzero_si128(), pending_bytes))));
}

__attribute__((target("avx2")))
static void rp_qgemm_finish_avx2(const rp_qgemm* g, int64_t m, int64_t rows, const rp_qgemm_columns* c,
                                 const uint32_t* sums) {
  if (g->lut) {
    if (g->residual) rp_qgemm_finish_rows_avx2(g, m, rows, c, sums, 1, 1);
    else rp_qgemm_finish_rows_avx2(g, m, rows, c, sums, 0, 1);
  } else if (g->residual) {
    rp_qgemm_finish_rows_avx2(g, m, rows, c, sums, 1, 0);
  } else {
    rp_qgemm_finish_rows_avx2(g, m, rows, c, sums, 0, 0);
  }
}

/* parts of 16 output bytes waiting to be looked up in a table together (up to four: one
   vector of 64 indices), each with where it goes and its mask */
typedef struct {
  __m128i bytes[4];
  uint8_t* at[4];
  __mmask16 mask[4];
  int count;
} rp_qgemm_pending;

/* the same, 16 columns at a time (a last part of fewer under a mask), for the bodies of
   AVX-512 (VNNI, AMX): the same operations on wider vectors, so the same bits; STORE16
   stores 16 values' bytes, or holds them in `pending` to be looked up in the table four
   parts at once (by VBMI, in its own target), and FLUSH looks up and stores what is held */
#define RP_QGEMM_FINISH512(NAME, TARGET, STORE16, FLUSH)                                                              \
__attribute__((target(TARGET)))                                                                                       \
static void NAME(const rp_qgemm* g, int64_t m, int64_t rows, const rp_qgemm_columns* c,                               \
                 const uint32_t* sums) {                                                                              \
  if (g->za_step) {                                                                                                   \
    for (int64_t r = 0; r < rows; r++)                                                                                \
      rp_qgemm_finish(g, m + r, c->n0, c->cols, sums + r * RP_QGEMM_COLUMNS, c->colsum, c->zb);                       \
    return;                                                                                                           \
  }                                                                                                                   \
  const int parts = (int)((c->cols + 15) / 16);                                                                       \
  __mmask16 masks[RP_QGEMM_COLUMNS / 16];                                                                             \
  __m512i fixed[RP_QGEMM_COLUMNS / 16], zb[RP_QGEMM_COLUMNS / 16];                                                    \
  __m512 scale[RP_QGEMM_COLUMNS / 16];                                                                                \
  for (int v = 0; v < parts; v++) {                                                                                   \
    const int64_t left = c->cols - 16 * v;                                                                            \
    masks[v] = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);                                        \
    fixed[v] = _mm512_loadu_si512(c->fixed + 16 * v);                                                                 \
    zb[v] = _mm512_loadu_si512(c->zb + 16 * v);                                                                       \
    scale[v] = _mm512_loadu_ps(c->scale + 16 * v);                                                                    \
  }                                                                                                                   \
  const int quantize = g->out_type != 0;                                                                              \
  const __m512 low = _mm512_set1_ps(c->low), high = _mm512_set1_ps(c->high);                                          \
  const __m512i zero = _mm512_set1_epi32(g->out_zero);                                                                \
  rp_qgemm_pending pending = {{_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()},  \
                              {0, 0, 0, 0}, {0, 0, 0, 0}, 0};                                                          \
  for (int64_t r = 0; r < rows; r++, sums += RP_QGEMM_COLUMNS) {                                                      \
    const __m512i ra = _mm512_set1_epi32((int)g->rowsum[m + r]);                                                      \
    for (int v = 0; v < parts; v++) {                                                                                 \
      __m512i value = _mm512_sub_epi32(_mm512_loadu_si512(sums + 16 * v), fixed[v]);                                  \
      if (!c->centered) value = _mm512_sub_epi32(value, _mm512_mullo_epi32(zb[v], ra));                               \
      if (!quantize) {                                                                                                \
        _mm512_mask_storeu_epi32(g->out + (m + r) * g->ld + c->n0 + 16 * v, masks[v], value);                         \
        continue;                                                                                                     \
      }                                                                                                               \
      const __m512 scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(value), scale[v]);                                       \
      const __m512 clamped = _mm512_min_ps(_mm512_max_ps(scaled, low), high);                                         \
      const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(clamped), zero);  /* in range: truncating keeps it */     \
      STORE16(g, &pending, (uint8_t*)g->qout + (m + r) * g->ld + c->n0 + 16 * v, masks[v], q);                        \
    }                                                                                                                 \
  }                                                                                                                   \
  FLUSH(g, &pending);                                                                                                 \
}
/* 16 values' bytes stored as they are (no table) ... */
static inline __attribute__((target("avx512f"), always_inline)) void rp_qgemm_store16(
    const rp_qgemm* g, rp_qgemm_pending* pending, uint8_t* at, __mmask16 mask, __m512i q) {
  (void)g, (void)pending;
  _mm512_mask_cvtepi32_storeu_epi8(at, mask, q);
}
static inline __attribute__((always_inline)) void rp_qgemm_flush_none(const rp_qgemm* g, rp_qgemm_pending* pending) {
  (void)g, (void)pending;
}
/* ... or looked up in the table by VBMI (an int8 value's index: value + 128): two VPERMI2B
   of its halves and a blend by the index's top bit, the same bytes as rp_qgemm_lookup32,
   on four parts at once (one part a lookup took half the finish of MobileNetV3-like QDQ's
   hard-swish layers, their 16 bytes in a vector of 64) */
static inline __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"), always_inline)) void
rp_qgemm_flush_lut(const rp_qgemm* g, rp_qgemm_pending* p) {
  if (!p->count) return;
  __m512i x = _mm512_inserti32x4(_mm512_castsi128_si512(p->bytes[0]), p->bytes[1], 1);
  x = _mm512_inserti32x4(_mm512_inserti32x4(x, p->bytes[2], 2), p->bytes[3], 3);
  if (g->out_type != 1) x = _mm512_xor_si512(x, _mm512_set1_epi8((char)0x80));
  const __m512i* table = (const __m512i*)g->lut;
  const __m512i low = _mm512_permutex2var_epi8(_mm512_loadu_si512(table), x, _mm512_loadu_si512(table + 1));
  const __m512i high = _mm512_permutex2var_epi8(_mm512_loadu_si512(table + 2), x, _mm512_loadu_si512(table + 3));
  const __m512i looked = _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), low, high);
  _mm_mask_storeu_epi8(p->at[0], p->mask[0], _mm512_castsi512_si128(looked));
  if (p->count > 1) _mm_mask_storeu_epi8(p->at[1], p->mask[1], _mm512_extracti32x4_epi32(looked, 1));
  if (p->count > 2) _mm_mask_storeu_epi8(p->at[2], p->mask[2], _mm512_extracti32x4_epi32(looked, 2));
  if (p->count > 3) _mm_mask_storeu_epi8(p->at[3], p->mask[3], _mm512_extracti32x4_epi32(looked, 3));
  p->count = 0;
}
static inline __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"), always_inline)) void
rp_qgemm_store16_lut(const rp_qgemm* g, rp_qgemm_pending* p, uint8_t* at, __mmask16 mask, __m512i q) {
  p->bytes[p->count] = _mm512_cvtepi32_epi8(q), p->at[p->count] = at, p->mask[p->count] = mask;
  if (++p->count == 4) rp_qgemm_flush_lut(g, p);
}
RP_QGEMM_FINISH512(rp_qgemm_finish_avx512, "avx512f", rp_qgemm_store16, rp_qgemm_flush_none)
RP_QGEMM_FINISH512(rp_qgemm_finish_avx512_lut, "avx512f,avx512bw,avx512vl,avx512vbmi", rp_qgemm_store16_lut,
                   rp_qgemm_flush_lut)

static void rp_qgemm_row(const rp_qgemm* g, int64_t k, int64_t n0, int64_t cols, uint8_t* row) {
  const uint8_t flip = g->b_signed ? 0 : 0x80;
  const uint8_t* src = g->B + k * g->ld + n0;
  for (int64_t c = 0; c < g->width; c++) row[c] = k < g->K && c < cols ? (uint8_t)(src[c] ^ flip) : 0;
}

/* ----------------------------------------------------------------------------- packing */

/* the columns' sums of a packed panel, stored after its groups */
static void rp_qgemm_column_sums(const rp_qgemm* g, uint8_t* panel) {
  uint32_t sums[RP_QGEMM_COLUMNS] = {0};
  for (int64_t k = 0; k < g->K4; k += 4)
    for (int c = 0; c < g->width; c++)
      for (int j = 0; j < 4; j++) sums[c] += (uint32_t)(int32_t)(int8_t)panel[k * g->width + 4 * c + j];
  memcpy(panel + g->K4 * g->width, sums, (size_t)g->width * sizeof(uint32_t));
}

/* the (wide) panel of columns n0 .. n0+cols of an unpacked B: rows k .. k+3 transposed 4 x 32 */
__attribute__((target("avx2")))
static void rp_qgemm_pack_avx2(const rp_qgemm* g, int64_t n0, int64_t cols, uint8_t* packed) {
  const __m256i flip = _mm256_set1_epi8(g->b_signed ? 0 : (char)0x80);
  uint8_t rows[4][RP_QGEMM_COLUMNS];
  for (int64_t k = 0; k < g->K4; k += 4) {
    __m256i r[4];
    for (int j = 0; j < 4; j++) {
      if (cols == RP_QGEMM_COLUMNS && k + j < g->K) {
        r[j] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(g->B + (k + j) * g->ld + n0)), flip);
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

/* any panel (a narrow one: its B is at most 16 columns, little to pack) */
static void rp_qgemm_pack_c(const rp_qgemm* g, int64_t n0, int64_t cols, uint8_t* packed) {
  uint8_t row[RP_QGEMM_COLUMNS];
  for (int64_t k = 0; k < g->K4; k++) {
    rp_qgemm_row(g, k, n0, cols, row);
    for (int c = 0; c < g->width; c++) packed[(k / 4) * 4 * g->width + c * 4 + k % 4] = row[c];
  }
}

/* ----------------------------------------------------------------------------- VNNI (AVX-512, AVX) */

/* ROWS rows of A' from row m over one panel, VECS vectors of COLS columns a group of four
   k: raw sums into sums[ROWS][32]. The VPDPBUSD bodies: body 2 (AVX-512 VNNI: 16 columns
   a vector, two for a wide panel, one for a narrow) and body 5 (AVX-VNNI: VPDPBUSD on
   256-bit vectors, on CPUs with AVX2 and VNNI but no AVX-512: 8 columns a vector) */
#define RP_QGEMM_DPBUSD_TILE(NAME, TARGET, VEC, COLS, ROWS, VECS, ZERO, LOAD, SET1, DOT, STORE)                        \
  __attribute__((target(TARGET)))                                                                                      \
  static void NAME(const rp_qgemm* g, int64_t m, const uint8_t* panel, uint32_t* sums) {                               \
    VEC acc[ROWS][VECS], b[VECS];                                                                                      \
    _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++)                                                             \
      _Pragma("GCC unroll 4") for (int h = 0; h < VECS; h++) acc[r][h] = ZERO();                                       \
    for (int64_t k = 0; k < g->K4; k += 4) {                                                                           \
      _Pragma("GCC unroll 4") for (int h = 0; h < VECS; h++) b[h] = LOAD(panel + k * COLS * VECS + 4 * COLS * h);      \
      _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++) {                                                         \
        int32_t quad;                                                                                                  \
        memcpy(&quad, g->A + (m + r - g->a_first) * g->Kp + k, 4);                                                     \
        const VEC a = SET1(quad);                                                                                      \
        _Pragma("GCC unroll 4") for (int h = 0; h < VECS; h++) acc[r][h] = DOT(acc[r][h], a, b[h]);                    \
      }                                                                                                                \
    }                                                                                                                  \
    _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++)                                                             \
      _Pragma("GCC unroll 4") for (int h = 0; h < VECS; h++) STORE(sums + r * RP_QGEMM_COLUMNS + COLS * h, acc[r][h]); \
  }
#define RP_LOAD512(p) _mm512_loadu_si512(p)
#define RP_STORE512(p, v) _mm512_storeu_si512(p, v)
#define RP_LOAD256(p) _mm256_loadu_si256((const __m256i*)(p))
#define RP_STORE256(p, v) _mm256_storeu_si256((__m256i*)(p), v)
#define RP_QGEMM_VNNI_TILE(ROWS, VECS)                                                                       \
  RP_QGEMM_DPBUSD_TILE(rp_qgemm_tile_vnni_##ROWS##_##VECS, "avx512f,avx512bw,avx512vnni", __m512i, 16, ROWS, \
                       VECS, _mm512_setzero_si512, RP_LOAD512, _mm512_set1_epi32, _mm512_dpbusd_epi32, RP_STORE512)
#define RP_QGEMM_AVXVNNI_TILE(ROWS, VECS)                                                                    \
  RP_QGEMM_DPBUSD_TILE(rp_qgemm_tile_avxvnni_##ROWS##_##VECS, "avx2,avxvnni", __m256i, 8, ROWS, VECS,        \
                       _mm256_setzero_si256, RP_LOAD256, _mm256_set1_epi32, _mm256_dpbusd_avx_epi32, RP_STORE256)
RP_QGEMM_VNNI_TILE(1, 1)
RP_QGEMM_VNNI_TILE(2, 1)
RP_QGEMM_VNNI_TILE(4, 1)
RP_QGEMM_VNNI_TILE(1, 2)
RP_QGEMM_VNNI_TILE(2, 2)
RP_QGEMM_VNNI_TILE(4, 2)
/* (AVX-VNNI: two rows of a wide panel, four of a narrow: eight accumulators of 16 registers) */
RP_QGEMM_AVXVNNI_TILE(1, 2)
RP_QGEMM_AVXVNNI_TILE(4, 2)
RP_QGEMM_AVXVNNI_TILE(1, 4)
RP_QGEMM_AVXVNNI_TILE(2, 4)



/* body 4 (direct): ROWS rows (output pixels) from row m over a narrow panel, with A' read
   from the image in place: for each tap, each row's pointer at its pixel's channels of the
   group (or at the zero point's row, in the padding), four channels a VPDPBUSD (a group's
   channels are whole quads). A convolution of narrow groups (RegNet's 16 outputs a group)
   multiplies 16 columns a byte of A': an im2col copy of A' cost more than the products */
/* the direct bodies' rows: a row's (output pixel's) image and the corner of its window */
typedef struct {
  const uint8_t* image;
  int64_t top, left;
} rp_qgemm_window;

static inline rp_qgemm_window rp_qgemm_window_of(const rp_qgemm* g, int64_t m) {
  const rp_qgemm_image* c = g->image;
  const int64_t pixels = c->out_height * c->out_width, n = m / pixels, at = m % pixels;
  const rp_qgemm_window w = {g->data + n * c->height * c->width * c->channels,
                             at / c->out_width * c->sh - c->top, at % c->out_width * c->sw - c->left};
  return w;
}

/* the group's channels a window's tap (ky, kx) reads: the image's, or the zero point's row */
static inline const uint8_t* rp_qgemm_tap(const rp_qgemm* g, const rp_qgemm_window* w, int64_t ky, int64_t kx) {
  const rp_qgemm_image* c = g->image;
  const int64_t h = w->top + ky * c->dh, x = w->left + kx * c->dw;
  const int inside = h >= 0 && h < c->height && x >= 0 && x < c->width;
  return inside ? w->image + (h * c->width + x) * c->channels : g->pad_row;
}

#define RP_QGEMM_DIRECT_BODY(NAME, TARGET, VEC, COLS, ROWS, ZERO, LOAD, SET1, SET1_8, XOR, DOT, STORE)                 \
  __attribute__((target(TARGET)))                                                                                      \
  static void NAME(const rp_qgemm* g, int64_t m, const uint8_t* panel, uint32_t* sums) {                               \
    enum { VECS = RP_QGEMM_NARROW / COLS };                                                                            \
    const rp_qgemm_image* c = g->image;                                                                                \
    const int64_t cg = g->K / (c->kh * c->kw);                                                                         \
    rp_qgemm_window window[ROWS];                                                                                      \
    for (int r = 0; r < ROWS; r++) window[r] = rp_qgemm_window_of(g, m + r);                                           \
    const VEC flip = SET1_8((char)g->flip);                                                                            \
    VEC acc[ROWS][VECS];                                                                                               \
    _Pragma("GCC unroll 8") for (int r = 0; r < ROWS; r++)                                                             \
      _Pragma("GCC unroll 2") for (int h = 0; h < VECS; h++) acc[r][h] = ZERO();                                       \
    const uint8_t* b = panel;                                                                                          \
    for (int64_t ky = 0; ky < c->kh; ky++)                                                                             \
      for (int64_t kx = 0; kx < c->kw; kx++) {                                                                         \
        const uint8_t* tap[ROWS];                                                                                      \
        for (int r = 0; r < ROWS; r++) tap[r] = rp_qgemm_tap(g, &window[r], ky, kx);                                   \
        for (int64_t q = 0; q < cg; q += 4, b += 4 * RP_QGEMM_NARROW) {                                                \
          VEC weights[VECS];                                                                                           \
          _Pragma("GCC unroll 2") for (int h = 0; h < VECS; h++) weights[h] = LOAD(b + 4 * COLS * h);                  \
          _Pragma("GCC unroll 8") for (int r = 0; r < ROWS; r++) {                                                     \
            int32_t quad;                                                                                              \
            memcpy(&quad, tap[r] + q, 4);                                                                              \
            const VEC a = XOR(SET1(quad), flip);                                                                       \
            _Pragma("GCC unroll 2") for (int h = 0; h < VECS; h++) acc[r][h] = DOT(acc[r][h], a, weights[h]);          \
          }                                                                                                            \
        }                                                                                                              \
      }                                                                                                                \
    _Pragma("GCC unroll 8") for (int r = 0; r < ROWS; r++)                                                             \
      _Pragma("GCC unroll 2") for (int h = 0; h < VECS; h++) STORE(sums + r * RP_QGEMM_COLUMNS + COLS * h, acc[r][h]); \
  }
/* body 4 (AVX-512 VNNI: the 16 columns in one vector, eight rows) and body 6 (AVX-VNNI:
   in two, four rows) */
#define RP_QGEMM_DIRECT_TILE(ROWS)                                                                           \
  RP_QGEMM_DIRECT_BODY(rp_qgemm_tile_direct_##ROWS, "avx512f,avx512bw,avx512vnni", __m512i, 16, ROWS,        \
                       _mm512_setzero_si512, RP_LOAD512, _mm512_set1_epi32, _mm512_set1_epi8, _mm512_xor_si512, \
                       _mm512_dpbusd_epi32, RP_STORE512)
#define RP_QGEMM_DIRECT_AVXVNNI_TILE(ROWS)                                                                   \
  RP_QGEMM_DIRECT_BODY(rp_qgemm_tile_direct_avxvnni_##ROWS, "avx2,avxvnni", __m256i, 8, ROWS,                \
                       _mm256_setzero_si256, RP_LOAD256, _mm256_set1_epi32, _mm256_set1_epi8, _mm256_xor_si256, \
                       _mm256_dpbusd_avx_epi32, RP_STORE256)
RP_QGEMM_DIRECT_TILE(1)
RP_QGEMM_DIRECT_TILE(4)
RP_QGEMM_DIRECT_TILE(8)
RP_QGEMM_DIRECT_AVXVNNI_TILE(1)
RP_QGEMM_DIRECT_AVXVNNI_TILE(4)

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

/* rows m .. m+32 of A' (m a multiple of 32) over one panel: raw sums into sums[32][32]; at
   most 16 columns (a narrow panel, or a wide one's last) are one tile of B', half the
   TDPBUSDs (the sums of the columns past 16 are not written); the last step's B' comes
   from `tail` when K4 is not whole steps (rp_qgemm_item) */
__attribute__((target("amx-tile,amx-int8")))
static void rp_qgemm_tile_amx(const rp_qgemm* g, int64_t m, const uint8_t* panel, const uint8_t* tail,
                              uint32_t* sums, int64_t cols, int stream) {
  const int64_t tile = 16 * RP_QGEMM_DEPTH, steps = g->Kp / RP_QGEMM_DEPTH;
  /* the two A' tiles of a step: 16 rows each, a step of k apart by `next`, rows `pitch` apart */
  const uint8_t* a = g->tiles + (m - g->a_first) / 16 * steps * tile;
  const uint8_t* b = a + steps * tile;
  int64_t next = tile, pitch = RP_QGEMM_DEPTH;
  if (g->rows && m < g->rows_full) {  /* in place */
    a = g->rows + m * g->K, b = a + 16 * g->K;
    next = RP_QGEMM_DEPTH, pitch = g->K;
  }
  const int stride = RP_QGEMM_COLUMNS * sizeof(uint32_t);
  _tile_zero(0);
  _tile_zero(2);
  if (cols <= 16) {
    for (int64_t k = 0; k < g->Kp; k += RP_QGEMM_DEPTH) {
      _tile_loadd(4, a + k / RP_QGEMM_DEPTH * next, pitch);
      _tile_loadd(5, b + k / RP_QGEMM_DEPTH * next, pitch);
      _tile_loadd(6, k + RP_QGEMM_DEPTH <= g->K4 ? panel + k * g->width : tail, 4 * g->width);
      _tile_dpbusd(0, 4, 6);
      _tile_dpbusd(2, 5, 6);
    }
    _tile_stored(0, sums, stride);
    _tile_stored(2, sums + 16 * RP_QGEMM_COLUMNS, stride);
    return;
  }
  _tile_zero(1);
  _tile_zero(3);
  for (int64_t k = 0; k < g->Kp; k += RP_QGEMM_DEPTH) {
    _tile_loadd(4, a + k / RP_QGEMM_DEPTH * next, pitch);
    _tile_loadd(5, b + k / RP_QGEMM_DEPTH * next, pitch);
    const uint8_t* w = k + RP_QGEMM_DEPTH <= g->K4 ? panel + k * RP_QGEMM_COLUMNS : tail;
    for (int line = 0; stream && line < RP_QGEMM_DEPTH * RP_QGEMM_COLUMNS; line += 64)
      _mm_prefetch((const char*)(panel + (k + RP_QGEMM_PREFETCH) * RP_QGEMM_COLUMNS) + line, _MM_HINT_T0);
    _tile_loadd(6, w, 4 * RP_QGEMM_COLUMNS);
    _tile_loadd(7, w + 64, 4 * RP_QGEMM_COLUMNS);
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 4, 7);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbusd(3, 5, 7);
  }
  _tile_stored(0, sums, stride);
  _tile_stored(1, sums + 16, stride);
  _tile_stored(2, sums + 16 * RP_QGEMM_COLUMNS, stride);
  _tile_stored(3, sums + 16 * RP_QGEMM_COLUMNS + 16, stride);
}

/* ----------------------------------------------------------------------------- AVX2 */

/* k of a panel one pass of the AVX2 tiles covers (RP_QGEMM_KBLOCK / 4 groups of a panel's
   row: 8 KiB of a wide panel): a work item runs its rows' tiles over one block of k, then
   the next, the block in the L1 cache for all its rows (a 3x3 convolution of 512 channels
   has a panel of 147 KiB, which each four rows read from L2 otherwise) */
#define RP_QGEMM_KBLOCK 256

/* the sums of 8 columns from the widening bodies' two accumulators (a column's two pair
   sums in adjacent lanes: columns 0-3 in lo, 4-7 in hi) into out, or (`more`) added to it:
   VPHADDD gives the columns in the order 0 1 4 5 | 2 3 6 7, VPERMQ restores it (a scalar
   loop over the lanes cost more than the products of a pointwise convolution of 16
   channels: MobileNetV3's 3136 x 16 x 16, full-range weights, one thread of a Zen 3) */
static inline __attribute__((target("avx2"), always_inline)) void rp_qgemm_pairs_avx2(uint32_t* out, __m256i lo,
                                                                                     __m256i hi, int more) {
  __m256i v = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xD8);
  if (more) v = _mm256_add_epi32(v, _mm256_loadu_si256((const __m256i*)out));
  _mm256_storeu_si256((__m256i*)out, v);
}

/* one row over one panel, the panel read once in its order (a decode step's GEMM reads its
   weight from memory: one pass, not one per 8 columns): for each group of four k, each 16
   bytes of it (4 columns x 4 k) widen to 16 int16, VPMADDWD with the row's four k (int16,
   from A16, repeated) gives each column's two pair sums in adjacent int32 lanes, added at the
   end. Q: the panel's vectors of 8 columns (4 wide, 2 narrow) */
#ifndef RP_QGEMM_STREAM_AHEAD
#define RP_QGEMM_STREAM_AHEAD 1024
#endif
#define RP_QGEMM_AVX2_ONE(Q)                                                                            \
  __attribute__((target("avx2")))                                                                      \
  static void rp_qgemm_tile_avx2_1_##Q(const rp_qgemm* g, int64_t m, const uint8_t* panel,            \
                                       uint32_t* sums, int64_t k0, int64_t k1, int more) {             \
    const int16_t* a0 = g->A16 + (m - g->a_first) * g->Kp;                                             \
    __m256i acc[Q][2];                                                                                 \
    _Pragma("GCC unroll 4") for (int q = 0; q < Q; q++) acc[q][0] = acc[q][1] = _mm256_setzero_si256(); \
    const uint8_t* bk = panel + k0 * 8 * Q;                                                            \
    for (int64_t k = k0; k < k1; k += 4, bk += 32 * Q) {                                                \
      int64_t four;                                                                                    \
      memcpy(&four, a0 + k, 8);                                                                        \
      const __m256i a = _mm256_set1_epi64x(four);                                                      \
      _mm_prefetch((const char*)(bk + RP_QGEMM_STREAM_AHEAD), _MM_HINT_T0);                           \
      _mm_prefetch((const char*)(bk + RP_QGEMM_STREAM_AHEAD + 64), _MM_HINT_T0);                      \
      _Pragma("GCC unroll 4") for (int q = 0; q < Q; q++) {                                            \
        const __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(bk + 32 * q)));       \
        const __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(bk + 32 * q + 16)));  \
        acc[q][0] = _mm256_add_epi32(acc[q][0], _mm256_madd_epi16(a, b0));                             \
        acc[q][1] = _mm256_add_epi32(acc[q][1], _mm256_madd_epi16(a, b1));                             \
      }                                                                                                \
    }                                                                                                  \
    for (int q = 0; q < Q; q++) rp_qgemm_pairs_avx2(sums + 8 * q, acc[q][0], acc[q][1], more);          \
  }
RP_QGEMM_AVX2_ONE(4)
RP_QGEMM_AVX2_ONE(2)

/* the same for four rows, the eight accumulators named (as an array GCC kept one of them
   in memory and moved the others between registers every step: ResNet-50 QDQ with the
   AVX2 paths, one thread, 80 -> 71 ms) */
#define RP_QGEMM_AVX2_ROW(r, a)                                                                    \
  acc##r##0 = _mm256_add_epi32(acc##r##0, _mm256_madd_epi16(a, b0));                              \
  acc##r##1 = _mm256_add_epi32(acc##r##1, _mm256_madd_epi16(a, b1))

static inline __attribute__((target("avx2"), always_inline)) __m256i rp_qgemm_four_avx2(const int16_t* row) {
  int64_t four;
  memcpy(&four, row, 8);
  return _mm256_set1_epi64x(four);
}

/* how far ahead of its reads the four-row tile asks for a streamed weight's bytes (32 rows of
   a decoder layer's 2048 x 5632 int8 projections, one Zen 3 thread: 1024 bytes 0.96 of the
   time without, 2048 0.94, 4096 0.90, 6144-8192 0.89-0.90) */
#ifndef RP_QGEMM_TILE_AHEAD
#define RP_QGEMM_TILE_AHEAD 4096
#endif
/* a weight of this many bytes or more (all its panels) is streamed: its bytes come from
   memory or a far cache, not L2 (ResNet-50's last stage, 49 rows, 1-2.4 MB weights: 0.92-0.94
   of their time; its first, 16-64 KB weights on 3136 rows, level; MobileNetV3-like's,
   at most 55 KB, 1.007 streamed: left out) */
#ifndef RP_QGEMM_STREAM_BYTES
#define RP_QGEMM_STREAM_BYTES (128 * 1024)
#endif
/* a four-row tile NAME from its body BODY (an always-inline function whose last argument,
   `stream`, is constant in each), and NAME##s, the same streaming its weight */
#define RP_QGEMM_STREAMED_TILES(NAME, BODY)                                                              \
  __attribute__((target("avx2"))) static void NAME(const rp_qgemm* g, int64_t m, const uint8_t* panel,  \
                                                   uint32_t* sums, int64_t k0, int64_t k1, int more) {  \
    BODY(g, m, panel, sums, k0, k1, more, 0);                                                           \
  }                                                                                                     \
  __attribute__((target("avx2"))) static void NAME##s(const rp_qgemm* g, int64_t m, const uint8_t* panel, \
                                                      uint32_t* sums, int64_t k0, int64_t k1, int more) { \
    BODY(g, m, panel, sums, k0, k1, more, 1);                                                           \
  }
/* the widening body's four rows; `stream`: a streamed weight's panel bytes asked for ahead */
static inline __attribute__((target("avx2"), always_inline)) void rp_qgemm_wide_rows4(
    const rp_qgemm* g, int64_t m, const uint8_t* panel, uint32_t* sums, int64_t k0, int64_t k1, int more,
    const int stream) {
  const int16_t* a0 = g->A16 + (m - g->a_first) * g->Kp;
  const int16_t *a1 = a0 + g->Kp, *a2 = a1 + g->Kp, *a3 = a2 + g->Kp;
  for (int q = 0; q < g->width / 8; q++) {
    __m256i acc00 = _mm256_setzero_si256(), acc01 = acc00, acc10 = acc00, acc11 = acc00;
    __m256i acc20 = acc00, acc21 = acc00, acc30 = acc00, acc31 = acc00;
    const uint8_t* bk = panel + k0 * g->width + 32 * q;
    for (int64_t k = k0; k < k1; k += 4, bk += 4 * g->width) {
      const __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)bk));
      const __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(bk + 16)));
      if (stream) _mm_prefetch((const char*)(bk + RP_QGEMM_TILE_AHEAD), _MM_HINT_T0);
      RP_QGEMM_AVX2_ROW(0, rp_qgemm_four_avx2(a0 + k));
      RP_QGEMM_AVX2_ROW(1, rp_qgemm_four_avx2(a1 + k));
      RP_QGEMM_AVX2_ROW(2, rp_qgemm_four_avx2(a2 + k));
      RP_QGEMM_AVX2_ROW(3, rp_qgemm_four_avx2(a3 + k));
    }
    /* (through memory, as GCC 12 kept its accumulators in registers only so: taken into the
       pair sums straight, it moved them between registers every step of k) */
    const __m256i accs[4][2] = {{acc00, acc01}, {acc10, acc11}, {acc20, acc21}, {acc30, acc31}};
    for (int r = 0; r < 4; r++)
      rp_qgemm_pairs_avx2(sums + r * RP_QGEMM_COLUMNS + 8 * q, accs[r][0], accs[r][1], more);
  }
}

RP_QGEMM_STREAMED_TILES(rp_qgemm_tile_avx2_4, rp_qgemm_wide_rows4)

/* ------------------------------------------------------------- AVX2, VPMADDUBSW (body 7) */

/* Where every pair of B' (k = 2j and 2j + 1 of a column) has |b0 + b1| <= 128, VPMADDUBSW
   cannot saturate: for b0 and b1 of one sign |a0 * b0 + a1 * b1| <= 255 * (|b0| + |b1|) =
   255 * |b0 + b1| <= 32640, and of opposite signs the two products cancel, |a0 * b0 + a1 *
   b1| <= 255 * 128. Then VPMADDUBSW (u8 x s8 pairs in int16), VPMADDWD with ones and
   VPADDD are exact: onnxruntime's AVX2 u8 x s8 steps, on this weight without its
   saturation, with a third fewer instructions a product than widening to 16 bits (ResNet-50
   of 7-bit weights, one thread of a Zen 3: see bench/results_quantized_avx2_cpu.md). A weight
   of 7 bits (onnxruntime's reduce_range, which its documentation advises for U8S8 on AVX2)
   always fits; one of the full 8 rarely does, and runs on the widening body (1). Which
   one a weight is, qgemm_panels.pairs_fit found at compile time: its panels' flag. */

#define RP_QGEMM_UBS(acc, a, b) acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones))

static inline __attribute__((target("avx2"), always_inline)) __m256i rp_qgemm_quad_avx2(const uint8_t* row) {
  int32_t quad;
  memcpy(&quad, row, 4);
  return _mm256_set1_epi32(quad);
}

/* four rows over k [k0, k1) of a panel, 16 columns at a time: each lane of an accumulator
   is one column's sum (VPMADDWD adds the pairs of its four k), added to the sums there
   (`more`: a later block of k) or stored; `stream` (a constant where inlined: a test in the
   loop cost 3-5%) asks for the panel's bytes RP_QGEMM_TILE_AHEAD ahead */
static inline __attribute__((target("avx2"), always_inline)) void rp_qgemm_ubs_rows4(
    const rp_qgemm* g, int64_t m, const uint8_t* panel, uint32_t* sums, int64_t k0, int64_t k1, int more,
    const int stream) {
  const uint8_t* a0 = g->A + (m - g->a_first) * g->a_stride;
  const uint8_t *a1 = a0 + g->a_stride, *a2 = a1 + g->a_stride, *a3 = a2 + g->a_stride;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int h = 0; h < g->width / 16; h++) {
    uint32_t* s0 = sums + 16 * h;
    uint32_t *s1 = s0 + RP_QGEMM_COLUMNS, *s2 = s1 + RP_QGEMM_COLUMNS, *s3 = s2 + RP_QGEMM_COLUMNS;
    __m256i acc00 = _mm256_setzero_si256(), acc01 = acc00, acc10 = acc00, acc11 = acc00;
    __m256i acc20 = acc00, acc21 = acc00, acc30 = acc00, acc31 = acc00;
    if (more) {
      acc00 = _mm256_loadu_si256((const __m256i*)s0), acc01 = _mm256_loadu_si256((const __m256i*)(s0 + 8));
      acc10 = _mm256_loadu_si256((const __m256i*)s1), acc11 = _mm256_loadu_si256((const __m256i*)(s1 + 8));
      acc20 = _mm256_loadu_si256((const __m256i*)s2), acc21 = _mm256_loadu_si256((const __m256i*)(s2 + 8));
      acc30 = _mm256_loadu_si256((const __m256i*)s3), acc31 = _mm256_loadu_si256((const __m256i*)(s3 + 8));
    }
    const uint8_t* bk = panel + k0 * g->width + 64 * h;
    for (int64_t k = k0; k < k1; k += 4, bk += 4 * g->width) {
      const __m256i b0 = _mm256_loadu_si256((const __m256i*)bk), b1 = _mm256_loadu_si256((const __m256i*)(bk + 32));
      if (stream) _mm_prefetch((const char*)(bk + RP_QGEMM_TILE_AHEAD), _MM_HINT_T0);
      __m256i a = rp_qgemm_quad_avx2(a0 + k);
      RP_QGEMM_UBS(acc00, a, b0);
      RP_QGEMM_UBS(acc01, a, b1);
      a = rp_qgemm_quad_avx2(a1 + k);
      RP_QGEMM_UBS(acc10, a, b0);
      RP_QGEMM_UBS(acc11, a, b1);
      a = rp_qgemm_quad_avx2(a2 + k);
      RP_QGEMM_UBS(acc20, a, b0);
      RP_QGEMM_UBS(acc21, a, b1);
      a = rp_qgemm_quad_avx2(a3 + k);
      RP_QGEMM_UBS(acc30, a, b0);
      RP_QGEMM_UBS(acc31, a, b1);
    }
    _mm256_storeu_si256((__m256i*)s0, acc00), _mm256_storeu_si256((__m256i*)(s0 + 8), acc01);
    _mm256_storeu_si256((__m256i*)s1, acc10), _mm256_storeu_si256((__m256i*)(s1 + 8), acc11);
    _mm256_storeu_si256((__m256i*)s2, acc20), _mm256_storeu_si256((__m256i*)(s2 + 8), acc21);
    _mm256_storeu_si256((__m256i*)s3, acc30), _mm256_storeu_si256((__m256i*)(s3 + 8), acc31);
  }
}

RP_QGEMM_STREAMED_TILES(rp_qgemm_tile_ubs_4, rp_qgemm_ubs_rows4)

/* one row over k [k0, k1) of a panel, read in its order, streamed ahead as the widening
   body's one row is (a decode step's 7-bit weight of 46 MB, 1 x 8192 x 5632, two threads
   of a Zen 3: 1.18 -> 1.09 ms, best of 25 interleaved rounds); Q vectors of 8 columns */
#define RP_QGEMM_UBS_ONE(Q)                                                                             \
  __attribute__((target("avx2")))                                                                      \
  static void rp_qgemm_tile_ubs_1_##Q(const rp_qgemm* g, int64_t m, const uint8_t* panel,             \
                                      uint32_t* sums, int64_t k0, int64_t k1, int more) {              \
    const uint8_t* a0 = g->A + (m - g->a_first) * g->a_stride;                                         \
    const __m256i ones = _mm256_set1_epi16(1);                                                         \
    __m256i acc[Q];                                                                                    \
    _Pragma("GCC unroll 4") for (int q = 0; q < Q; q++)                                                \
      acc[q] = more ? _mm256_loadu_si256((const __m256i*)(sums + 8 * q)) : _mm256_setzero_si256();     \
    const uint8_t* bk = panel + k0 * 8 * Q;                                                            \
    for (int64_t k = k0; k < k1; k += 4, bk += 32 * Q) {                                                \
      const __m256i a = rp_qgemm_quad_avx2(a0 + k);                                                    \
      _mm_prefetch((const char*)(bk + RP_QGEMM_STREAM_AHEAD), _MM_HINT_T0);                           \
      _mm_prefetch((const char*)(bk + RP_QGEMM_STREAM_AHEAD + 64), _MM_HINT_T0);                      \
      _Pragma("GCC unroll 4") for (int q = 0; q < Q; q++)                                              \
        RP_QGEMM_UBS(acc[q], a, _mm256_loadu_si256((const __m256i*)(bk + 32 * q)));                    \
    }                                                                                                  \
    for (int q = 0; q < Q; q++) _mm256_storeu_si256((__m256i*)(sums + 8 * q), acc[q]);                 \
  }
RP_QGEMM_UBS_ONE(4)
RP_QGEMM_UBS_ONE(2)

/* body 8: the direct bodies' tiles (A' read from the image in place, see body 4) by
   VPMADDUBSW, for a weight whose pairs fit; four rows of the narrow panel's 16 columns in
   eight accumulators, as AVX-VNNI's */
static inline __attribute__((target("avx2"), always_inline)) __m256i rp_qgemm_ubs_dot(__m256i acc, __m256i a,
                                                                                     __m256i b) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
}
#define RP_QGEMM_DIRECT_UBS_TILE(ROWS)                                                                       \
  RP_QGEMM_DIRECT_BODY(rp_qgemm_tile_direct_ubs_##ROWS, "avx2", __m256i, 8, ROWS, _mm256_setzero_si256,     \
                       RP_LOAD256, _mm256_set1_epi32, _mm256_set1_epi8, _mm256_xor_si256, rp_qgemm_ubs_dot, \
                       RP_STORE256)
RP_QGEMM_DIRECT_UBS_TILE(1)
RP_QGEMM_DIRECT_UBS_TILE(4)

/* the AVX2 bodies' tiles: rows from m over k [k0, k1) of a panel, into sums or (`more`)
   added to them */
typedef void (*rp_qgemm_ktile)(const rp_qgemm* g, int64_t m, const uint8_t* panel, uint32_t* sums, int64_t k0,
                               int64_t k1, int more);

/* rows m .. (at most `left`, up to RP_QGEMM_AMX_ROWS) over the panel by an AVX2 body's tiles
   (`four` rows at a time, `one` a row: a wide panel's, `narrow` a narrow one's), block of k
   after block: the rows it took */
static int64_t rp_qgemm_blocked_rows(const rp_qgemm* g, int64_t m, int64_t left, const uint8_t* panel,
                                     uint32_t* sums, rp_qgemm_ktile four, rp_qgemm_ktile one,
                                     rp_qgemm_ktile narrow) {
  const int64_t rows = left < RP_QGEMM_AMX_ROWS ? left : RP_QGEMM_AMX_ROWS;
  const rp_qgemm_ktile single = g->width == RP_QGEMM_COLUMNS ? one : narrow;
  for (int64_t k0 = 0; k0 < g->K4; k0 += RP_QGEMM_KBLOCK) {
    const int64_t k1 = k0 + RP_QGEMM_KBLOCK < g->K4 ? k0 + RP_QGEMM_KBLOCK : g->K4;
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) four(g, m + r, panel, sums + r * RP_QGEMM_COLUMNS, k0, k1, k0 > 0);
    for (; r < rows; r++) single(g, m + r, panel, sums + r * RP_QGEMM_COLUMNS, k0, k1, k0 > 0);
  }
  return rows;
}

/* ----------------------------------------------------------------------------- portable */

/* pairs of products (k = 2j, 2j + 1), each pair's sum saturated to int16 where b_signed is 2
   (VPMADDUBSW's arithmetic; A' is A there: uint8), else exact */
static void rp_qgemm_tile_c(const rp_qgemm* g, int64_t m, const uint8_t* panel, uint32_t* sums) {
  const uint8_t* a = g->A + (m - g->a_first) * g->Kp;
  const int saturate = g->b_signed == 2;
  memset(sums, 0, RP_QGEMM_COLUMNS * sizeof(uint32_t));
  for (int64_t k = 0; k < g->K4; k += 4)
    for (int c = 0; c < g->width; c++)
      for (int j = 0; j < 4; j += 2) {
        const int8_t* b = (const int8_t*)panel + k * g->width + 4 * c + j;
        int32_t pair = (int32_t)a[k + j] * b[0] + (int32_t)a[k + j + 1] * b[1];
        if (saturate) pair = pair > 32767 ? 32767 : pair < -32768 ? -32768 : pair;
        sums[c] += (uint32_t)pair;
      }
}

/* ----------------------------------------------------------------------------- driver */

/* rows m .. of A' over the panel: the body's widest tile that fits; the rows it took */
static int rp_qgemm_rows(const rp_qgemm* g, int body, int64_t m, const uint8_t* panel, const uint8_t* tail,
                         uint32_t* sums, int64_t cols, int stream) {
  const int64_t left = g->M - m;
  if (body == 7)
    return (int)rp_qgemm_blocked_rows(g, m, left, panel, sums,
                                      g->stream ? rp_qgemm_tile_ubs_4s : rp_qgemm_tile_ubs_4, rp_qgemm_tile_ubs_1_4,
                                      rp_qgemm_tile_ubs_1_2);
  if (body == 1)
    return (int)rp_qgemm_blocked_rows(g, m, left, panel, sums,
                                      g->stream ? rp_qgemm_tile_avx2_4s : rp_qgemm_tile_avx2_4,
                                      rp_qgemm_tile_avx2_1_4, rp_qgemm_tile_avx2_1_2);
  /* AMX: the tiles hold zero rows up to a whole step, so a last step of fewer rows is one too */
  if (body == 3) return rp_qgemm_tile_amx(g, m, panel, tail, sums, cols, stream), RP_QGEMM_AMX_ROWS;
  if (body == 4) {  /* 8 rows: eight chains of VPDPBUSD in flight, its latency hidden */
    if (left >= 8) return rp_qgemm_tile_direct_8(g, m, panel, sums), 8;
    if (left >= 4) return rp_qgemm_tile_direct_4(g, m, panel, sums), 4;
    return rp_qgemm_tile_direct_1(g, m, panel, sums), 1;
  }
  if (body == 6) {
    if (left >= 4) return rp_qgemm_tile_direct_avxvnni_4(g, m, panel, sums), 4;
    return rp_qgemm_tile_direct_avxvnni_1(g, m, panel, sums), 1;
  }
  if (body == 8) {
    if (left >= 4) return rp_qgemm_tile_direct_ubs_4(g, m, panel, sums), 4;
    return rp_qgemm_tile_direct_ubs_1(g, m, panel, sums), 1;
  }
  if (body == 5 && g->width == RP_QGEMM_NARROW) {
    if (left >= 4) return rp_qgemm_tile_avxvnni_4_2(g, m, panel, sums), 4;
    return rp_qgemm_tile_avxvnni_1_2(g, m, panel, sums), 1;
  }
  if (body == 5) {
    if (left >= 2) return rp_qgemm_tile_avxvnni_2_4(g, m, panel, sums), 2;
    return rp_qgemm_tile_avxvnni_1_4(g, m, panel, sums), 1;
  }
  if (body >= 2 && g->width == RP_QGEMM_NARROW) {
    if (left >= 4) return rp_qgemm_tile_vnni_4_1(g, m, panel, sums), 4;
    if (left >= 2) return rp_qgemm_tile_vnni_2_1(g, m, panel, sums), 2;
    return rp_qgemm_tile_vnni_1_1(g, m, panel, sums), 1;
  }
  if (body >= 2) {
    if (left >= 4) return rp_qgemm_tile_vnni_4_2(g, m, panel, sums), 4;
    if (left >= 2) return rp_qgemm_tile_vnni_2_2(g, m, panel, sums), 2;
    return rp_qgemm_tile_vnni_1_2(g, m, panel, sums), 1;
  }
  return rp_qgemm_tile_c(g, m, panel, sums), 1;
}

/* the most rows of A a work item computes: with the panels, the items the threads share,
   so a convolution's GEMM of many rows and few output channels (one panel) splits over the
   threads as well as a projection of one row */
#define RP_QGEMM_BLOCK_ROWS 256

int raypass_get_num_threads(void);

/* the rows of each block of a GEMM of M rows (a last one may have fewer), where a work
   item is a block (times `per_block`: the panels of the panel mode, and the groups): on
   one thread RP_QGEMM_BLOCK_ROWS; on more, whole steps of 32 rows (a body's pass over a
   panel's block of k serves 32 rows: a block of 196 rows ran 2% slower than of 256, as 6
   steps and one of 4 rows) in the count of blocks, from the fewest of at most
   RP_QGEMM_BLOCK_ROWS to twice that, whose last thread ends first, counting each item
   as long as a whole block. Blocks of 256 split 28 x 28 pixels into 256 + 256 + 256 + 16,
   and two threads ran 512 rows and 272 (ResNet-50's second stage); blocks of 224 run 448
   and 336. The split does not change a bit of the result: each sum is exact, each output
   requantized alone */
static int64_t rp_qgemm_block_rows(int64_t M, int64_t per_block) {
  const int64_t threads = raypass_get_num_threads(), fewest = (M + RP_QGEMM_BLOCK_ROWS - 1) / RP_QGEMM_BLOCK_ROWS;
  if (threads <= 1) return RP_QGEMM_BLOCK_ROWS;
  int64_t best = RP_QGEMM_BLOCK_ROWS, best_span = -1;
  for (int64_t blocks = fewest; blocks <= 2 * fewest; blocks++) {
    const int64_t steps = ((M + blocks - 1) / blocks + RP_QGEMM_AMX_ROWS - 1) / RP_QGEMM_AMX_ROWS;
    const int64_t rows = steps * RP_QGEMM_AMX_ROWS, items = (M + rows - 1) / rows * per_block;
    const int64_t span = (items + threads - 1) / threads * rows;
    if (best_span < 0 || span < best_span) best = rows, best_span = span;
  }
  return best;
}

/* the GEMM of group `group` alone: its rows of A', its panels, its columns of B and out */
static rp_qgemm rp_qgemm_group(const rp_qgemm* g, int64_t group) {
  rp_qgemm v = *g;
  if (group == 0) return v;
  const int64_t panels = (g->N + g->width - 1) / g->width;
  if (v.A) v.A += group * g->a_group_rows * g->Kp;
  if (v.A16) v.A16 += group * g->a_group_rows * g->Kp;
  if (v.tiles) v.tiles += group * g->tile_group_rows * g->Kp;
  v.rowsum += group * g->M;
  v.B += g->b_packed ? group * panels * RP_QGEMM_PANEL(g->K4, g->width) : group * g->N;
  v.out += group * g->N;
  if (g->zb_step) v.zb = (const uint8_t*)g->zb + group * g->N;  /* 8-bit zero points */
  if (g->qout) v.qout = (uint8_t*)g->qout + group * g->N;
  if (g->residual) v.residual = (const uint8_t*)g->residual + group * g->N;  /* laid out as qout */
  if (g->bias_kind == 2) v.bias += group * g->N;
  if (g->multiplier_step) v.multiplier += group * g->N;
  if (g->data) v.data += group * (g->K / (g->image->kh * g->image->kw));
  return v;
}

static int rp_qgemm_pack_panels(void* ctx, int64_t begin, int64_t end) {
  const rp_qgemm* g = (const rp_qgemm*)ctx;
  uint8_t* packed = (uint8_t*)g->packed;
  const int64_t panels = (g->N + g->width - 1) / g->width;
  for (int64_t i = begin; i < end; i++) {
    const rp_qgemm v = rp_qgemm_group(g, i / panels);
    const int64_t n0 = i % panels * g->width;
    const int64_t cols = v.N - n0 < g->width ? v.N - n0 : g->width;
    uint8_t* panel = packed + i * RP_QGEMM_PANEL(g->K4, g->width);
    if (v.body >= 1 && g->width == RP_QGEMM_COLUMNS) rp_qgemm_pack_avx2(&v, n0, cols, panel);
    else rp_qgemm_pack_c(&v, n0, cols, panel);
    rp_qgemm_column_sums(&v, panel);
  }
  return 0;
}

/* rows [first, last) of group `group` by the columns of panel t (a body's step may compute
   rows past `last`, whole AMX steps or VNNI's 4 rows: another item's, which finishes them) */
static void rp_qgemm_item(const rp_qgemm* all, int64_t group, int64_t first, int64_t last, int64_t t) {
  const rp_qgemm view = rp_qgemm_group(all, group);
  const rp_qgemm* g = &view;
  uint32_t sums[RP_QGEMM_AMX_ROWS * RP_QGEMM_COLUMNS];
  const int64_t n0 = t * g->width;
  const int64_t cols = g->N - n0 < g->width ? g->N - n0 : g->width;
  const uint8_t* panel = g->B + t * RP_QGEMM_PANEL(g->K4, g->width);
  /* AMX: a last step of fewer than 64 k reads B' from a copy padded with zeros (a panel
     holds K4 k, not whole steps) */
  uint8_t tail[RP_QGEMM_DEPTH / 4 * 4 * RP_QGEMM_COLUMNS] __attribute__((aligned(64)));
  const int64_t whole = g->K4 / RP_QGEMM_DEPTH * RP_QGEMM_DEPTH;
  if (g->body == 3 && whole < g->K4) {
    memset(tail, 0, sizeof(tail));
    memcpy(tail, panel + whole * g->width, (size_t)((g->K4 - whole) * g->width));
  }
  rp_qgemm_columns columns;
  rp_qgemm_columns_of(g, n0, cols, panel, &columns);
  for (int64_t m = first; m < last;) {
    /* a body's steps (32 rows of AMX, 4 of the others) until the sums hold 32 rows or the
       item's rows end, then one finish step for them all */
    int64_t rows = 0;
    while (rows < RP_QGEMM_AMX_ROWS && m + rows < last)
      rows += rp_qgemm_rows(g, g->body, m + rows, panel, tail, sums + rows * RP_QGEMM_COLUMNS, cols,
                            m + rows == first);
    const int64_t done = m + rows < last ? rows : last - m;
    if (g->body >= 2 && g->body <= 4 && !g->residual && !g->lut) {
      rp_qgemm_finish_avx512(g, m, done, &columns, sums);
    } else if (g->body >= 2 && g->body <= 4 && !g->residual && g->vbmi) {
      rp_qgemm_finish_avx512_lut(g, m, done, &columns, sums);
    } else if (g->body >= 1) {  /* (a residual add, a table: on AVX2's vectors, which every AVX-512 CPU has) */
      rp_qgemm_finish_avx2(g, m, done, &columns, sums);
    } else {
      for (int64_t r = 0; r < done; r++)
        rp_qgemm_finish(g, m + r, n0, cols, sums + r * RP_QGEMM_COLUMNS, columns.colsum, columns.zb);
    }
    m += rows;
  }
}

/* The work items of a parallel loop, claimed one at a time by whichever thread is free
   (each chunk rp_parallel_for hands out takes items until none is left): with the items
   split in one run a thread, the loop waits for the slowest thread, and a core that
   another process shares runs its run late (dynamic int8, one row, two threads on a
   shared 2-core machine: see bench/results_quantized_avx2.md). An item's sums do not
   depend on which thread computes it. */
typedef struct {
  const void* ctx;
  int64_t extent, next;
} rp_qgemm_claims;

static int64_t rp_qgemm_claim(rp_qgemm_claims* c) {
  return __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED);
}

/* runs of work items a thread claims of a streamed weight: few enough that a panel's
   prefetches serve the thread's own next item, enough that a core another process slows
   leaves its share to the others */
#define RP_QGEMM_STREAM_RUNS 4

/* work item i: group i / (blocks * panels), the rows of its block i / panels % blocks by the
   columns of its panel i % panels (A' made before) */
static int rp_qgemm_blocks(void* ctx, int64_t begin, int64_t end) {
  rp_qgemm_claims* claims = (rp_qgemm_claims*)ctx;
  const rp_qgemm* all = (const rp_qgemm*)claims->ctx;
  const int64_t panels = (all->N + all->width - 1) / all->width;
  const int64_t size = all->block_rows, blocks = (all->M + size - 1) / size;
  (void)begin, (void)end;
  if (all->body == 3) rp_qgemm_amx_begin();
  /* a streamed weight's items in runs of RP_QGEMM_STREAM_RUNS a thread: a panel's
     prefetches reach into the next one, which a thread claiming one item at a time left to
     the other (a decoder's 32-row projections 0.84 of their time, one row 0.97, ResNet-50
     QDQ 0.98, at two threads on a Sapphire Rapids; one thread runs them in the same order) */
  int64_t run = 1;
  if (all->stream) {
    run = claims->extent / (raypass_get_num_threads() * RP_QGEMM_STREAM_RUNS);
    if (run < 1) run = 1;
  }
  for (int64_t i = __atomic_fetch_add(&claims->next, run, __ATOMIC_RELAXED); i < claims->extent;
       i = __atomic_fetch_add(&claims->next, run, __ATOMIC_RELAXED))
    for (int64_t j = i; j < i + run && j < claims->extent; j++) {
      const int64_t first = j / panels % blocks * size;
      const int64_t last = first + size < all->M ? first + size : all->M;
      rp_qgemm_item(all, j / (blocks * panels), first, last, j % panels);
    }
  if (all->body == 3) rp_qgemm_amx_end();
  return 0;
}

/* A' and what the bodies read of it, for rows [begin, end) of all groups */
typedef struct {
  const uint8_t* A;             /* [groups, M, K], or the image (image != 0) */
  const rp_qgemm_image* image;  /* A is this convolution's im2col matrix, gathered here */
  uint8_t pad;                  /* the image's zero point: what its padding holds */
  uint8_t *Au, *tiles;
  uint32_t* rowsum;
  int16_t* A16;
  int64_t M, K, Kp;             /* M: rows of a group */
  int64_t a_first, a_group_rows, tile_group_rows;  /* as rp_qgemm's */
  uint8_t flip;
  int avx2, amx;
  int rowsums;                  /* 0: every zb' is 0, so no value reads a row's sum (left 0) */
  int64_t copy_from;            /* rows below it AMX reads in place (rp_qgemm.rows): not made */
  int64_t group_channels;       /* an image's: K / (kh * kw), once (not a division a row) */
} rp_qgemm_operand;

/* rows of group `group` of the im2col matrix, the output pixels (oh, ow) .. (oh, ow + count
   - 1) of image n (one line of them), row i at row + i * stride: for each tap the group's
   channels of the pixel it reads, or the zero point where it reads padding. The taps' lines
   are checked and found once for all the rows, the sizes kept in locals (the copies store
   through uint8_t pointers, which may alias the structs: GCC reloaded every field after
   every copy), and a row of taps inside the image, each of all its pixel's channels, one
   pixel after the next (no dilation), is one run of the line, copied at once (a 7x7
   stem's 3-channel taps are 21 bytes a row, not seven copies of 3). One row at a time,
   MobileNetV3-like's 3-channel stem (12544 rows of three 9-byte copies) took about 35
   cycles a row. rp_qgemm_copy copies n bytes from src to dst, 16 at a time where it can
   (the copies of a gather are short: a group's channels, often 16 or 32, where a libc
   call costs more than the copy) */
static inline __attribute__((always_inline)) void rp_qgemm_copy(uint8_t* dst, const uint8_t* src, int64_t n) {
  if (n < 16) {  /* two copies that overlap where n is not a power of two (a 3-channel image's taps) */
    uint64_t u, v;
    uint32_t x, y;
    if (n >= 8) memcpy(&u, src, 8), memcpy(&v, src + n - 8, 8), memcpy(dst, &u, 8), memcpy(dst + n - 8, &v, 8);
    else if (n >= 4) memcpy(&x, src, 4), memcpy(&y, src + n - 4, 4), memcpy(dst, &x, 4), memcpy(dst + n - 4, &y, 4);
    else for (int64_t i = 0; i < n; i++) dst[i] = src[i];
    return;
  }
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm_storeu_si128((__m128i*)(dst + i), _mm_loadu_si128((const __m128i*)(src + i)));
  /* the last bytes: the 16 that end the row, some copied twice */
  if (i < n) _mm_storeu_si128((__m128i*)(dst + n - 16), _mm_loadu_si128((const __m128i*)(src + n - 16)));
}

/* `count` copies of n bytes, from src + i * step to dst + i * stride: a gather's rows of taps
   inside the image, the size's case chosen once for them all (per copy, rp_qgemm_copy's
   tests cost as much as a 9-byte copy: MobileNetV3-like's RGB stem) */
static inline __attribute__((always_inline)) void rp_qgemm_runs(uint8_t* dst, int64_t stride, const uint8_t* src,
                                                                int64_t step, int64_t count, int64_t n) {
  if (n >= 8 && n <= 16) {  /* two 8-byte copies that overlap where n is not 16 */
    for (int64_t i = 0; i < count; i++, dst += stride, src += step) {
      uint64_t u, v;
      memcpy(&u, src, 8), memcpy(&v, src + n - 8, 8), memcpy(dst, &u, 8), memcpy(dst + n - 8, &v, 8);
    }
  } else if (n >= 16 && n <= 32) {  /* two of 16 */
    for (int64_t i = 0; i < count; i++, dst += stride, src += step) {
      const __m128i u = _mm_loadu_si128((const __m128i*)src), v = _mm_loadu_si128((const __m128i*)(src + n - 16));
      _mm_storeu_si128((__m128i*)dst, u), _mm_storeu_si128((__m128i*)(dst + n - 16), v);
    }
  } else {
    for (int64_t i = 0; i < count; i++, dst += stride, src += step) rp_qgemm_copy(dst, src, n);
  }
}

static void rp_qgemm_gather(const rp_qgemm_operand* p, int64_t group, int64_t n, int64_t oh, int64_t ow,
                            int64_t count, uint8_t* row, int64_t stride) {
  const rp_qgemm_image* c = p->image;
  const int64_t cg = p->group_channels, channels = c->channels, height = c->height, width = c->width;
  const int64_t kh = c->kh, kw = c->kw, sw = c->sw, dh = c->dh, dw = c->dw, taps = kw * cg;
  const int64_t line_bytes = width * channels, h0 = oh * c->sh - c->top, left = c->left;
  const uint8_t pad = p->pad;
  const uint8_t* image = p->A + n * height * line_bytes + group * cg;
  const int runs = dw == 1 && cg == channels;
  for (int64_t ky = 0; ky < kh; ky++) {
    uint8_t* out = row + ky * taps;
    const int64_t h = h0 + ky * dh;
    if (h < 0 || h >= height) {  /* a row of taps in the padding */
      for (int64_t i = 0; i < count; i++) memset(out + i * stride, pad, (size_t)taps);
      continue;
    }
    const uint8_t* line = image + h * line_bytes;
    /* the pixels [inside, outside) whose row of taps lies inside the line: one run each */
    int64_t inside = count, outside = count;
    if (runs) {
      const int64_t w0 = ow * sw - left, last = width - kw - w0;  /* w0 + i * sw in [0, width - kw] */
      inside = w0 >= 0 ? 0 : (-w0 + sw - 1) / sw;
      outside = last < 0 ? inside : last / sw + 1;
      if (inside > count) inside = count;
      if (outside > count) outside = count;
      if (outside < inside) outside = inside;
    }
    for (int64_t i = 0; i < count; i++) {
      uint8_t* at = out + i * stride;
      const int64_t w0 = (ow + i) * sw - left;
      if (i == inside && outside > inside) {  /* the inside pixels at once, the copy's size chosen once */
        rp_qgemm_runs(at, stride, line + w0 * channels, sw * channels, outside - inside, taps);
        i = outside - 1;
        continue;
      }
      for (int64_t kx = 0; kx < kw; kx++, at += cg) {
        const int64_t w = w0 + kx * dw;
        if (w < 0 || w >= width) memset(at, pad, (size_t)cg);
        else rp_qgemm_copy(at, line + w * channels, cg);
      }
    }
  }
}

/* dst = src ^ flip over k bytes, and the sum of dst (exact: SAD adds bytes in 64 bits) */
__attribute__((target("avx2"))) static uint32_t rp_qgemm_flip_avx2(const uint8_t* src, uint8_t* dst, int64_t k,
                                                                   uint8_t flip) {
  const __m256i f = _mm256_set1_epi8((char)flip), zero = _mm256_setzero_si256();
  __m256i acc = zero;
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    const __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(src + i)), f);
    _mm256_storeu_si256((__m256i*)(dst + i), v);
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(v, zero));
  }
  if (i + 16 <= k) {  /* a half vector (a row of 16 or 48 k) */
    const __m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i*)(src + i)), _mm256_castsi256_si128(f));
    _mm_storeu_si128((__m128i*)(dst + i), v);
    acc = _mm256_add_epi64(acc, _mm256_zextsi128_si256(_mm_sad_epu8(v, _mm_setzero_si128())));
    i += 16;
  }
  uint64_t lanes[4];
  _mm256_storeu_si256((__m256i*)lanes, acc);
  uint32_t s = (uint32_t)(lanes[0] + lanes[1] + lanes[2] + lanes[3]);
  for (; i < k; i++) s += dst[i] = (uint8_t)(src[i] ^ flip);
  return s;
}

/* dst = (src ^ flip) widened to int16 over k bytes, zeros from k to kp (a multiple of 16),
   and the sum of the flipped bytes: the widening body's A' made in one pass from A's row
   (or its gathered taps), with no byte copy of it in between (a copy, then a pass to widen it,
   took more than the products of a pointwise convolution of 16 channels: MobileNetV3's
   3136 x 16 x 16, full-range weights) */
__attribute__((target("avx2"))) static uint32_t rp_qgemm_widen_avx2(const uint8_t* src, int16_t* dst, int64_t k,
                                                                    int64_t kp, uint8_t flip) {
  const __m128i f = _mm_set1_epi8((char)flip), zero = _mm_setzero_si128();
  __m128i acc = zero;
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i*)(src + i)), f);
    _mm256_storeu_si256((__m256i*)(dst + i), _mm256_cvtepu8_epi16(v));
    acc = _mm_add_epi64(acc, _mm_sad_epu8(v, zero));
  }
  uint32_t s = (uint32_t)((uint64_t)_mm_cvtsi128_si64(acc) + (uint64_t)_mm_extract_epi64(acc, 1));
  if (i < k) {  /* the row's last bytes, in a vector of zeros (no read past the row) */
    uint8_t last[16] = {0};
    for (int64_t j = i; j < k; j++) s += last[j - i] = (uint8_t)(src[j] ^ flip);
    _mm256_storeu_si256((__m256i*)(dst + i), _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)last)));
    i += 16;
  }
  for (; i < kp; i += 16) _mm256_storeu_si256((__m256i*)(dst + i), _mm256_setzero_si256());
  return s;
}

/* AMX: a row of A' goes straight into its tiles: byte k of row `row` of a group is at
   ((row / 16 * steps + k / 64) * 16 + row % 16) * 64 + k % 64, so a row is `steps` runs of 64
   bytes, 1 KiB apart. rp_qgemm_put_avx2 writes n bytes of src, each ^ flip, to bytes
   k .. k + n of the row at `row` (its first run); with `repeat`, src is 64 bytes of a
   pattern (the padding's value) read again for each run. (A fill written as stores of one
   value GCC turns into a memset, whose REP STOS start-up costs more than these copies.) */
__attribute__((target("avx2"), always_inline)) static inline void rp_qgemm_put_avx2(
    uint8_t* row, int64_t k, const uint8_t* src, int64_t n, uint8_t flip, int repeat) {
  const __m128i f = _mm_set1_epi8((char)flip);
  while (n > 0) {
    const int64_t offset = k % RP_QGEMM_DEPTH;
    const int64_t run = n < RP_QGEMM_DEPTH - offset ? n : RP_QGEMM_DEPTH - offset;
    uint8_t* dst = row + k / RP_QGEMM_DEPTH * 16 * RP_QGEMM_DEPTH + offset;
    int64_t i = 0;
    for (; i + 16 <= run; i += 16)
      _mm_storeu_si128((__m128i*)(dst + i), _mm_xor_si128(_mm_loadu_si128((const __m128i*)(src + i)), f));
    for (; i < run; i++) dst[i] = (uint8_t)(src[i] ^ flip);
    if (!repeat) src += run;
    k += run, n -= run;
  }
}

/* the sum of a row of A' in tile order (exact: SAD adds bytes in 64 bits) */
__attribute__((target("avx2"))) static uint32_t rp_qgemm_tile_row_sum_avx2(const uint8_t* row, int64_t steps) {
  const __m256i zero = _mm256_setzero_si256();
  __m256i acc = zero;
  for (int64_t j = 0; j < steps; j++, row += 16 * RP_QGEMM_DEPTH) {
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_loadu_si256((const __m256i*)row), zero));
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_loadu_si256((const __m256i*)(row + 32)), zero));
  }
  uint64_t lanes[4];
  _mm256_storeu_si256((__m256i*)lanes, acc);
  return (uint32_t)(lanes[0] + lanes[1] + lanes[2] + lanes[3]);
}

/* AMX: the rows of A' [count, Kp] at `rows` (an image's gathered taps, each ^ flip; bytes
   past K hold flip, so they become 0) placed in the tiles from row `row` of a group at
   `tiles`: each row's steps of 64 bytes, 1 KiB apart; its sum where a value reads it */
__attribute__((target("avx2"))) static void rp_qgemm_place_tiles(const rp_qgemm_operand* p, const uint8_t* rows,
                                                                 int64_t count, uint8_t* tiles, int64_t row,
                                                                 uint32_t* sums) {
  const int64_t steps = p->Kp / RP_QGEMM_DEPTH;
  const __m256i f = _mm256_set1_epi8((char)p->flip);
  for (int64_t i = 0; i < count; i++, row++, rows += p->Kp) {
    uint8_t* dst = tiles + ((row - p->a_first) / 16 * steps * 16 + row % 16) * RP_QGEMM_DEPTH;
    for (int64_t j = 0; j < steps; j++) {
      const uint8_t* src = rows + j * RP_QGEMM_DEPTH;
      uint8_t* to = dst + j * 16 * RP_QGEMM_DEPTH;
      _mm256_storeu_si256((__m256i*)to, _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)src), f));
      _mm256_storeu_si256((__m256i*)(to + 32), _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(src + 32)), f));
    }
    sums[i] = p->rowsums ? rp_qgemm_tile_row_sum_avx2(dst, steps) : 0;
  }
}

/* the most bytes of gathered rows an AMX image's prepare holds at once (a line of output
   pixels, or part of one) */
#define RP_QGEMM_TILE_GATHER_BYTES 32768

/* rows [begin, end) of all groups into the AMX tiles, zeros past K. An image's taps are
   gathered (rp_qgemm_gather, as the other bodies gather them) a line of output pixels at a
   time into a buffer of whole rows, then placed in the tiles: placing each tap's bytes in
   the tiles one by one cost ResNet-50's 3-channel 7x7 stem 5.3x its VNNI time, and
   MobileNetV3-like's 3x3 one 5.1x, on a Sapphire Rapids */
__attribute__((target("avx2"))) static int rp_qgemm_prepare_tiles(const rp_qgemm_operand* p, int64_t begin,
                                                                  int64_t end) {
  if (begin < p->copy_from) begin = p->copy_from < end ? p->copy_from : end;  /* (one group then) */
  const int64_t steps = p->Kp / RP_QGEMM_DEPTH;
  const rp_qgemm_image* c = p->image;
  int64_t group = begin / p->M, row = begin % p->M;
  if (c) {
    const int64_t pixels = c->out_height * c->out_width;
    int64_t n = row / pixels, oh = row % pixels / c->out_width, ow = row % c->out_width;
    int64_t most = RP_QGEMM_TILE_GATHER_BYTES / p->Kp;
    if (most < 1) most = 1;
    uint8_t* gathered = (uint8_t*)malloc((size_t)(most * p->Kp));
    if (!gathered) return -1;
    for (int64_t r = 0; r < most; r++) memset(gathered + r * p->Kp + p->K, p->flip, (size_t)(p->Kp - p->K));
    for (int64_t m = begin; m < end;) {
      int64_t run = end - m < p->M - row ? end - m : p->M - row;
      if (run > c->out_width - ow) run = c->out_width - ow;
      if (run > most) run = most;
      rp_qgemm_gather(p, group, n, oh, ow, run, gathered, p->Kp);
      rp_qgemm_place_tiles(p, gathered, run, p->tiles + group * p->tile_group_rows * p->Kp, row, p->rowsum + m);
      m += run, row += run, ow += run;
      if (row == p->M) row = 0, n = 0, oh = 0, ow = 0, group++;
      else if (ow == c->out_width) {
        ow = 0;
        if (++oh == c->out_height) oh = 0, n++;
      }
    }
    free(gathered);
    return 0;
  }
  uint8_t zeros[RP_QGEMM_DEPTH];  /* what flips to 0 */
  memset(zeros, p->flip, sizeof(zeros));
  for (int64_t m = begin; m < end; m++) {
    uint8_t* dst = p->tiles + group * p->tile_group_rows * p->Kp +
                   ((row - p->a_first) / 16 * steps * 16 + row % 16) * RP_QGEMM_DEPTH;
    rp_qgemm_put_avx2(dst, 0, p->A + m * p->K, p->K, p->flip, 0);
    if (p->Kp > p->K) rp_qgemm_put_avx2(dst, p->K, zeros, p->Kp - p->K, p->flip, 1);
    p->rowsum[m] = p->rowsums ? rp_qgemm_tile_row_sum_avx2(dst, steps) : 0;
    if (++row == p->M) row = 0, group++;
  }
  return 0;
}

static int rp_qgemm_prepare(void* ctx, int64_t begin, int64_t end) {
  const rp_qgemm_operand* p = (const rp_qgemm_operand*)ctx;
  if (p->amx) return rp_qgemm_prepare_tiles(p, begin, end);
  /* a uint8 image (A' is A) whose rows no value sums: gathered straight into place */
  const int straight = p->image && !p->flip && !p->rowsums;
  /* else a gathered row is Kp bytes: past K, bytes that flip to 0 (so whole vectors flip) */
  uint8_t* gathered = p->image && !straight ? (uint8_t*)malloc((size_t)p->Kp) : 0;
  if (p->image && !straight && !gathered) return -1;
  if (gathered) memset(gathered + p->K, p->flip, (size_t)(p->Kp - p->K));
  const int64_t valid = p->image ? p->Kp : p->K;  /* bytes of a row to flip */
  /* where row `begin` is: its group, its row in the group, and (an image's) its output
     pixel; then counted up row by row (a division per row cost more than the copies) */
  int64_t group = begin / p->M, row = begin % p->M, n = 0, oh = 0, ow = 0;
  if (p->image) {
    const int64_t pixels = p->image->out_height * p->image->out_width;
    n = row / pixels, oh = row % pixels / p->image->out_width, ow = row % p->image->out_width;
  }
  int64_t ready = begin;  /* straight: the rows below it are gathered */
  for (int64_t m = begin; m < end; m++) {
    const int64_t at = (group * p->a_group_rows + row - p->a_first) * p->Kp;
    uint8_t* dst = p->Au + at;
    const uint8_t* src = gathered;
    if (straight && m >= ready) {  /* the rest of this line of output pixels, at once */
      int64_t run = end - m < p->M - row ? end - m : p->M - row;
      if (run > p->image->out_width - ow) run = p->image->out_width - ow;
      rp_qgemm_gather(p, group, n, oh, ow, run, dst, p->Kp);
      ready = m + run;
      /* nothing more to make of these rows but A16's (their sums stay 0): on to the last
         (a step a row cost a third of the gather of MobileNetV3-like's RGB stem) */
      if (!p->A16) m += run - 1, row += run - 1, ow += run - 1;
    } else if (p->image && !straight) {
      rp_qgemm_gather(p, group, n, oh, ow, 1, gathered, 0);
    }
    else src = p->A + m * p->K;
    /* a row's bytes past `valid` are zeros from the buffer's calloc: nothing writes them (a
       first layer's 27 bytes a row of 64 cleared each time cost a tenth of its GEMM) */
    uint32_t s = 0;  /* straight: the row's sum stays 0, nothing reads it */
    if (p->A16) /* the widening body reads A' as int16 only */
      s = straight ? (rp_qgemm_widen_avx2(dst, p->A16 + at, p->K, p->Kp, 0), 0)
                   : rp_qgemm_widen_avx2(src, p->A16 + at, valid, p->Kp, p->flip);
    else if (!straight && p->avx2) s = rp_qgemm_flip_avx2(src, dst, valid, p->flip);
    else if (!straight)
      for (int64_t k = 0; k < valid; k++) s += dst[k] = (uint8_t)(src[k] ^ p->flip);
    p->rowsum[m] = s;
    if (++row == p->M) row = 0, n = 0, oh = 0, ow = -1, group++;
    if (p->image && ++ow == p->image->out_width) {
      ow = 0;
      if (++oh == p->image->out_height) oh = 0, n++;
    }
  }
  free(gathered);
  return 0;
}

/* row mode: work item i is block i % blocks of group i / blocks, whose rows of A' it
   makes itself, then multiplies by every panel (one parallel loop, not two; the block's
   A' still in the cache): for GEMMs of at least as many row blocks as panels */
typedef struct {
  const rp_qgemm* g;
  const rp_qgemm_operand* operand;
} rp_qgemm_rowwise;

static int rp_qgemm_row_blocks(void* ctx, int64_t begin, int64_t end) {
  rp_qgemm_claims* claims = (rp_qgemm_claims*)ctx;
  const rp_qgemm_rowwise* w = (const rp_qgemm_rowwise*)claims->ctx;
  (void)begin, (void)end;
  const int64_t panels = (w->g->N + w->g->width - 1) / w->g->width;
  const int64_t size = w->g->block_rows, blocks = (w->g->M + size - 1) / size;
  /* the block's A' in buffers of this call's own, reused block after block, so it stays in
     this core's cache from its copy to its products (buffers of every row are written out
     to memory and read back); a body's last step may read past the block (whole AMX steps,
     VNNI's 4 rows): rows whose sums nothing stores */
  rp_qgemm g = *w->g;
  rp_qgemm_operand operand = *w->operand;
  const size_t bytes = (size_t)((RP_QGEMM_BLOCK_ROWS + RP_QGEMM_AMX_ROWS) * g.Kp);
  /* AVX2: int16 A' too; direct, or A read in place: none */
  const int wide = g.body == 1, direct = g.body == 4 || g.body == 6 || g.body == 8 || g.in_place;
  uint8_t* buffer = direct ? 0 : (uint8_t*)calloc(wide ? 3 * bytes : bytes, 1);
  if (!buffer && !direct) return -1;
  if (g.body == 3) {
    g.tiles = operand.tiles = buffer;
  } else if (!direct) {
    g.A = operand.Au = buffer;
    if (wide) g.A16 = operand.A16 = (int16_t*)(buffer + bytes);
  }
  g.a_group_rows = g.tile_group_rows = operand.a_group_rows = operand.tile_group_rows = 0;
  int status = 0;
  for (int64_t i = rp_qgemm_claim(claims); i < claims->extent && status == 0; i = rp_qgemm_claim(claims)) {
    const int64_t group = i / blocks, first = i % blocks * size;
    const int64_t last = first + size < g.M ? first + size : g.M;
    g.a_first = operand.a_first = g.in_place ? 0 : first;  /* in place: the rows of A itself */
    if (!direct) status = rp_qgemm_prepare(&operand, group * g.M + first, group * g.M + last);
    if (g.body == 3) rp_qgemm_amx_begin();
    for (int64_t t = 0; t < panels && status == 0; t++) rp_qgemm_item(&g, group, first, last, t);
    if (g.body == 3) rp_qgemm_amx_end();
  }
  free(buffer);
  return status;
}

/* the calls each body has run in this library (tests read them: which body a call took) */
#define RP_QGEMM_BODIES 11
static int64_t rp_qgemm_calls[RP_QGEMM_BODIES];

int64_t rp_qgemm_body_calls(int body) {
  return body >= 0 && body < RP_QGEMM_BODIES ? __atomic_load_n(&rp_qgemm_calls[body], __ATOMIC_RELAXED) : -1;
}

/* `groups` GEMMs of one shape in one call (1: one GEMM): A [groups, M, K] int8 (a_signed 1)
   or uint8, row-major; B int8 (b_signed 1) or uint8: the groups' panels one after the
   other (b_packed 1: passinfra/ir/op/qgemm_panels.py), or [K, groups * N] row-major, group
   g's columns from g * N on; za one value or one per row (za_step 0 or 1, the same rows in
   every group), zb one value or one per column of all groups (zb_step 0 or 1), of their
   operand's type; out [M, groups * N] int32, group g's columns from g * N on. Returns 0, or
   -1 when a buffer cannot be allocated. */
/* what rp_qgemm_i8 / rp_qconv_i8 do with a sum (out_type 0: store it as int32) */
typedef struct {
  const void* bias;        /* int32: one (bias_kind 1) or one per column (2) */
  const void* multiplier;  /* float: one, or one per column (multiplier_step 1) */
  const void* zero;        /* the output's zero point: uint8 (out_type 1) or int8 (2) */
  int64_t bias_kind, multiplier_step, out_type;
  /* a residual add (rp_qgemm_add_i8): the residual, qnn.add's scales and zero points (its
     lhs, rhs, the sum's), whether the residual is its lhs; residual 0: none */
  const void* residual;
  float lhs_scale, rhs_scale, add_scale;
  int64_t lhs_zero, rhs_zero, add_zero, residual_first;
  /* a table of 256 values of the output's type the outputs are looked up in (from the
     type's lowest), last; 0: none */
  const void* table;
} rp_qgemm_epilogue;

/* the output, requantization and residual add of `g` from the entry point's epilogue
   arguments (out: int32 sums where out_type is 0, else requantized bytes) */
static void rp_qgemm_set_epilogue(rp_qgemm* g, const rp_qgemm_epilogue* e, void* out, uint8_t* lut_rows) {
  const int quantize = e->out_type != 0;
  g->out = quantize ? 0 : (int32_t*)out;
  g->qout = quantize ? out : 0;
  g->bias = (const int32_t*)e->bias, g->multiplier = (const float*)e->multiplier;
  g->bias_kind = e->bias_kind, g->multiplier_step = e->multiplier_step, g->out_type = (int)e->out_type;
  g->out_zero = !quantize ? 0 : e->out_type == 1 ? *(const uint8_t*)e->zero : *(const int8_t*)e->zero;
  /* the residual add's ratios and constant term, once (qnn.add's float32 operations, in order) */
  g->residual = quantize ? e->residual : 0;
  g->add_lhs = g->residual ? e->lhs_scale / e->add_scale : 0.0f;
  g->add_rhs = g->residual ? e->rhs_scale / e->add_scale : 0.0f;
  g->add_fixed = g->residual ? (float)e->add_zero - (g->add_lhs * (float)e->lhs_zero + g->add_rhs * (float)e->rhs_zero)
                             : 0.0f;
  g->residual_first = (int)e->residual_first;
  g->lut = quantize ? (const uint8_t*)e->table : 0;
  if (g->lut) rp_qgemm_lut_rows(g->lut, lut_rows);
  g->lut_rows = lut_rows;
}

/* ----------------------------------------------------------------------------- depthwise */
/* A depthwise convolution (one input channel and one output a group: rp_qconv_i8 with
   groups == channels and N 1) has no GEMM in it: each output sums the kh * kw taps of its
   own channel. Its bodies compute, per output pixel and channel c,

     sum_t (x_t - za) * (w_t - zb) = sum_t x_t * w'_t - za * sum_t w'_t,   w' = w - zb

   with x_t the image's value (as its type: uint8, or int8 sign-extended) or, for a tap in
   the padding, za itself (it adds nothing, as in the reference). Body 9 (AVX2) widens each
   input row once to 16 bits, pixels w and w + dw side by side (a ring of the rows an output
   row's windows span), so a pair of taps (kx, kx + 1) of 8 channels is one load, times the
   pair of weights w' (at most 255 in magnitude) by VPMADDWD into 32-bit sums, exact; four
   output pixels at a time share each pair of weights. Body 10 (portable, and channels
   fewer than 8) sums tap by tap in C. The epilogue is the GEMM's operations
   (rp_qgemm_requantize_value, rp_qgemm_added8, rp_qgemm_lookup32) in the same order, so
   every body and thread count gives the reference's bits. The weight is HWIO [kh, kw, 1,
   channels]: B [taps, channels] as rp_qgemm_i8 has it. */
typedef struct {
  rp_qgemm g;              /* the epilogue (rp_qgemm_set_epilogue), ld = channels, and the geometry */
  const uint8_t* data;     /* the image */
  const uint8_t* pad;      /* `channels` bytes of za: what a tap in the padding reads */
  const int64_t* offsets;  /* per tap: its pixel's offset in the image from the window's corner */
  const int16_t* centered; /* w' as int16, [taps, channels], of the channels body 9 leaves */
  const int16_t* pairs;    /* w' of a filter row's taps (kx, kx + 1), a last odd one with 0:
                              [channels / 8][kh * row_pairs][8][2] */
  const uint32_t* fixed;   /* per channel: the bias less za * sum_t w'_t (uint32: wraps as int32 does) */
  const float* scale;      /* per channel: the requantization's multiplier */
  int64_t taps, row_pairs, pair_count;
  float low, high;         /* the rounded value's range: the output type's less the zero point */
  int a_signed, widened;   /* widened: body 9 */
  int vnni;                /* body 9's sums of 16 channels by AVX-512 VNNI, lookups by VBMI */
  int64_t entries;         /* of a widened row: the padded columns the windows span */
  int64_t ring;            /* widened rows held: the rows a window spans */
  int64_t rows, bands;     /* output rows (batch * out_height), split in this many bands */
} rp_qdw;

/* widened rows hold int16 values: a pair of pixels' channels are 4 bytes */
#define RP_QDW_PAIR 2
/* the most rows a ring holds (a taller filter's convolution is body 10's) */
#define RP_QDW_RING 64
/* body 9's cost for the thread pool, an output pixel's channel: its pairs' slots (two a
   pair, at RP_QDW_SLOTS_PER_WORK a unit) and RP_QDW_PIXEL_SLOTS more for the rest (widening
   rows, requantizing, storing). Measured in MobileNetV3-like QDQ on a Sapphire Rapids, one
   thread: 0.5-0.7 ns a 3x3 layer's pixel and channel, 1.2-1.8 a 5x5's; counted as
   multiply-adds at RP_MACS_PER_WORK, a fourth to a third of that, its stride-2 layers
   (56x56x16, 28x28x72, 14x14x96, 7x7x288) ran on one thread of two */
#define RP_QDW_SLOTS_PER_WORK 40
#define RP_QDW_PIXEL_SLOTS 20

/* `pairs[p]`: pair p's first pixel in its widened row, for one output pixel. The sums of
   channels [c, c + 8) of that pixel */
static inline __attribute__((target("avx2"), always_inline)) __m256i rp_qdw_sums8(
    const rp_qdw* d, const int16_t* const* pairs, int64_t c) {
  const __m256i* w = (const __m256i*)(d->pairs + c / 8 * d->pair_count * 16);
  __m256i acc = _mm256_setzero_si256();
  for (int64_t p = 0; p < d->pair_count; p++)
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(pairs[p] + c * RP_QDW_PAIR)),
                                                  _mm256_loadu_si256(w + p)));
  return _mm256_add_epi32(acc, _mm256_loadu_si256((const __m256i*)(d->fixed + c)));
}

/* the sums of channels [c, c + 16) of four output pixels side by side: each pair of weights
   loaded once for the four (sums[2i], sums[2i + 1]: pixel i's); `pairs[p]`: pair p's first
   pixel in its widened row (one loop over the pairs: GCC kept the sums in registers so,
   where a loop over rows and one over a row's pairs copied them every step) */
static inline __attribute__((target("avx2"), always_inline)) void rp_qdw_sums16x4(
    const rp_qdw* d, const int16_t* const* pairs, int64_t c, __m256i* sums) {
  const int64_t pixel = d->g.image->sw * d->g.image->channels * RP_QDW_PAIR;  /* to the next pixel */
  const __m256i* w0 = (const __m256i*)(d->pairs + c / 8 * d->pair_count * 16);
  const __m256i* w1 = w0 + d->pair_count;
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
#define RP_QDW_MADD(acc, at, w) \
  acc = _mm256_add_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(at)), w), acc)
  for (int64_t p = 0; p < d->pair_count; p++) {
    const int16_t* x = pairs[p] + c * RP_QDW_PAIR;
    const __m256i wa = _mm256_loadu_si256(w0 + p), wb = _mm256_loadu_si256(w1 + p);
    RP_QDW_MADD(a0, x, wa);
    RP_QDW_MADD(a1, x + 16, wb);
    RP_QDW_MADD(a2, x + pixel, wa);
    RP_QDW_MADD(a3, x + pixel + 16, wb);
    RP_QDW_MADD(a4, x + 2 * pixel, wa);
    RP_QDW_MADD(a5, x + 2 * pixel + 16, wb);
    RP_QDW_MADD(a6, x + 3 * pixel, wa);
    RP_QDW_MADD(a7, x + 3 * pixel + 16, wb);
  }
#undef RP_QDW_MADD
  const __m256i lo = _mm256_loadu_si256((const __m256i*)(d->fixed + c));
  const __m256i hi = _mm256_loadu_si256((const __m256i*)(d->fixed + c + 8));
  sums[0] = _mm256_add_epi32(a0, lo), sums[1] = _mm256_add_epi32(a1, hi);
  sums[2] = _mm256_add_epi32(a2, lo), sums[3] = _mm256_add_epi32(a3, hi);
  sums[4] = _mm256_add_epi32(a4, lo), sums[5] = _mm256_add_epi32(a5, hi);
  sums[6] = _mm256_add_epi32(a6, lo), sums[7] = _mm256_add_epi32(a7, hi);
}

/* rp_qdw_sums16x4 by AVX-512 VNNI, as four vectors of 16 channels (sums[i]: pixel i's): the
   16 channels' pairs of a pixel are one vector, and VPDPWSSD adds each lane's pair of
   products to its sum (VPMADDWD and VPADDD in one: the same exact int32). On a Zen 4 (512-bit operations on 256-bit units) MobileNetV3-like
   QDQ's depthwise layers took 0.91-0.98 of their AVX2 time; with their hard-swish tables
   looked up by VBMI (rp_qgemm_lookup32_vbmi) 0.79-0.85, the model 0.955 at one thread */
static inline __attribute__((target("avx2,avx512f,avx512bw,avx512vnni"), always_inline)) void rp_qdw_sums512(
    const rp_qdw* d, const int16_t* const* pairs, int64_t c, __m512i* sums) {
  const int64_t pixel = d->g.image->sw * d->g.image->channels * RP_QDW_PAIR;
  const __m256i* w0 = (const __m256i*)(d->pairs + c / 8 * d->pair_count * 16);
  const __m256i* w1 = w0 + d->pair_count;
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t p = 0; p < d->pair_count; p++) {
    const int16_t* x = pairs[p] + c * RP_QDW_PAIR;
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(w0 + p)),
                                         _mm256_loadu_si256(w1 + p), 1);
    a0 = _mm512_dpwssd_epi32(a0, _mm512_loadu_si512((const void*)x), w);
    a1 = _mm512_dpwssd_epi32(a1, _mm512_loadu_si512((const void*)(x + pixel)), w);
    a2 = _mm512_dpwssd_epi32(a2, _mm512_loadu_si512((const void*)(x + 2 * pixel)), w);
    a3 = _mm512_dpwssd_epi32(a3, _mm512_loadu_si512((const void*)(x + 3 * pixel)), w);
  }
  const __m512i fixed = _mm512_loadu_si512((const void*)(d->fixed + c));
  sums[0] = _mm512_add_epi32(a0, fixed), sums[1] = _mm512_add_epi32(a1, fixed);
  sums[2] = _mm512_add_epi32(a2, fixed), sums[3] = _mm512_add_epi32(a3, fixed);
}

/* the same as AVX2's eight halves (sums[2i], sums[2i + 1]: pixel i's) */
static inline __attribute__((target("avx2,avx512f,avx512bw,avx512vnni"), always_inline)) void rp_qdw_sums16x4_vnni(
    const rp_qdw* d, const int16_t* const* pairs, int64_t c, __m256i* sums) {
  __m512i wide[4];
  rp_qdw_sums512(d, pairs, c, wide);
  for (int i = 0; i < 4; i++)
    sums[2 * i] = _mm512_castsi512_si256(wide[i]), sums[2 * i + 1] = _mm512_extracti64x4_epi64(wide[i], 1);
}

/* the same of channels [c, c + 8) (sums[i]: pixel i's) */
static inline __attribute__((target("avx2"), always_inline)) void rp_qdw_sums8x4(
    const rp_qdw* d, const int16_t* const* pairs, int64_t c, __m256i* sums) {
  const int64_t pixel = d->g.image->sw * d->g.image->channels * RP_QDW_PAIR;
  const __m256i* w = (const __m256i*)(d->pairs + c / 8 * d->pair_count * 16);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t p = 0; p < d->pair_count; p++) {
    const int16_t* x = pairs[p] + c * RP_QDW_PAIR;
    const __m256i wp = _mm256_loadu_si256(w + p);
    a0 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)x), wp), a0);
    a1 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(x + pixel)), wp), a1);
    a2 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(x + 2 * pixel)), wp), a2);
    a3 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(x + 3 * pixel)), wp), a3);
  }
  const __m256i fixed = _mm256_loadu_si256((const __m256i*)(d->fixed + c));
  sums[0] = _mm256_add_epi32(a0, fixed), sums[1] = _mm256_add_epi32(a1, fixed);
  sums[2] = _mm256_add_epi32(a2, fixed), sums[3] = _mm256_add_epi32(a3, fixed);
}

/* 8 sums of channels from c requantized (and added to the residual at `at`): 8 words */
static inline __attribute__((target("avx2"), always_inline)) __m128i rp_qdw_words(
    const rp_qdw* d, __m256i sums, int64_t c, int64_t at, const int add) {
  const rp_qgemm* g = &d->g;
  const __m256 scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), _mm256_loadu_ps(d->scale + c));
  __m256i q = _mm256_add_epi32(
      _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(scaled, _mm256_set1_ps(d->low)), _mm256_set1_ps(d->high))),
      _mm256_set1_epi32(g->out_zero));
  if (add)
    q = rp_qgemm_added8(g, q, (const uint8_t*)g->residual + at + c, _mm256_set1_ps(g->out_type == 1 ? 0.0f : -128.0f),
                        _mm256_set1_ps(g->out_type == 1 ? 255.0f : 127.0f));
  return _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
}

/* two pixels' 16 channels (words w0, w1 and w2, w3) as bytes, looked up (LOOKUP32) where
   there is a table, stored at at0 + c and at1 + c */
#define RP_QDW_STORE2X16(NAME, TARGET, LOOKUP32)                                                                      \
  static inline __attribute__((target(TARGET), always_inline)) void NAME(                                              \
      const rp_qgemm* g, __m128i w0, __m128i w1, __m128i w2, __m128i w3, int64_t at0, int64_t at1, int64_t c) {        \
    __m256i bytes = g->out_type == 1 ? _mm256_set_m128i(_mm_packus_epi16(w2, w3), _mm_packus_epi16(w0, w1))          \
                                     : _mm256_set_m128i(_mm_packs_epi16(w2, w3), _mm_packs_epi16(w0, w1));           \
    if (g->lut) bytes = LOOKUP32(g, bytes);                                                                            \
    _mm_storeu_si128((__m128i*)((uint8_t*)g->qout + at0 + c), _mm256_castsi256_si128(bytes));                         \
    _mm_storeu_si128((__m128i*)((uint8_t*)g->qout + at1 + c), _mm256_extracti128_si256(bytes, 1));                    \
  }
RP_QDW_STORE2X16(rp_qdw_store2x16, "avx2", rp_qgemm_lookup32)
RP_QDW_STORE2X16(rp_qdw_store2x16_vbmi, "avx2,avx512f,avx512bw,avx512vbmi", rp_qgemm_lookup32_vbmi)

/* channels [c, c + 16) of four output pixels side by side (the first at `at` of the
   output), or [c, c + 8) where fewer are left; `add` (a residual) a constant; SUMS16: the sums of
   16 channels, by AVX2 or by AVX-512 VNNI */
#define RP_QDW_PIXELS4(NAME, TARGET, SUMS16, LOOKUP32, STORE2X16)                                                                           \
  static inline __attribute__((target(TARGET), always_inline)) void NAME(                                              \
      const rp_qdw* d, const int16_t* const* pairs, int64_t at, int64_t c, const int add) {                            \
  const rp_qgemm* g = &d->g;                                                                                           \
  const int64_t channels = g->image->channels;                                                                         \
  if (c + 16 > channels) {  /* a last block of 8 channels */                                                           \
    __m256i sums[4];                                                                                                   \
    rp_qdw_sums8x4(d, pairs, c, sums);                                                                                 \
    for (int64_t i = 0; i < 4; i += 2) {  /* two pixels' 8 bytes looked up at once */                                  \
      const int64_t at0 = at + i * channels, at1 = at0 + channels;                                                     \
      if (g->out_type == 0) {                                                                                          \
        _mm256_storeu_si256((__m256i*)(g->out + at0 + c), sums[i]);                                                    \
        _mm256_storeu_si256((__m256i*)(g->out + at1 + c), sums[i + 1]);                                                \
        continue;                                                                                                      \
      }                                                                                                                \
      const __m128i w0 = rp_qdw_words(d, sums[i], c, at0, add), w1 = rp_qdw_words(d, sums[i + 1], c, at1, add);        \
      __m128i bytes = g->out_type == 1 ? _mm_packus_epi16(w0, w1) : _mm_packs_epi16(w0, w1);                           \
      if (g->lut) bytes = _mm256_castsi256_si128(LOOKUP32(g, _mm256_set_m128i(_mm_setzero_si128(), bytes)));           \
      _mm_storel_epi64((__m128i*)((uint8_t*)g->qout + at0 + c), bytes);                                                \
      _mm_storel_epi64((__m128i*)((uint8_t*)g->qout + at1 + c), _mm_unpackhi_epi64(bytes, bytes));                     \
    }                                                                                                                  \
    return;                                                                                                            \
  }                                                                                                                    \
  {                                                                                                                    \
    __m256i sums[8];                                                                                                   \
    SUMS16(d, pairs, c, sums);                                                                                         \
    for (int64_t i = 0; i < 4; i += 2) {  /* two pixels at a time: their bytes looked up at once */                    \
      const int64_t at0 = at + i * channels, at1 = at0 + channels;                                                     \
      const __m256i* s = sums + 2 * i;                                                                                 \
      if (g->out_type == 0) {                                                                                          \
        _mm256_storeu_si256((__m256i*)(g->out + at0 + c), s[0]);                                                       \
        _mm256_storeu_si256((__m256i*)(g->out + at0 + c + 8), s[1]);                                                   \
        _mm256_storeu_si256((__m256i*)(g->out + at1 + c), s[2]);                                                       \
        _mm256_storeu_si256((__m256i*)(g->out + at1 + c + 8), s[3]);                                                   \
        continue;                                                                                                      \
      }                                                                                                                \
      STORE2X16(g, rp_qdw_words(d, s[0], c, at0, add), rp_qdw_words(d, s[1], c + 8, at0, add),                         \
                       rp_qdw_words(d, s[2], c, at1, add), rp_qdw_words(d, s[3], c + 8, at1, add), at0, at1, c);       \
    }                                                                                                                  \
  }                                                                                                                    \
}
RP_QDW_PIXELS4(rp_qdw_pixels4_avx2, "avx2", rp_qdw_sums16x4, rp_qgemm_lookup32, rp_qdw_store2x16)
RP_QDW_PIXELS4(rp_qdw_pixels4_avx512, "avx2,avx512f,avx512bw,avx512vnni,avx512vbmi", rp_qdw_sums16x4_vnni,
               rp_qgemm_lookup32_vbmi, rp_qdw_store2x16_vbmi)

/* the channels from `first` of one output pixel at `at` in whole blocks of 8 (returns where
   they end) */
static inline __attribute__((target("avx2"), always_inline)) int64_t rp_qdw_pixel_avx2(
    const rp_qdw* d, const int16_t* const* pairs, int64_t at, int64_t first, const int add) {
  const rp_qgemm* g = &d->g;
  const int64_t channels = g->image->channels;
  int64_t c = first;
  for (; c + 8 <= channels; c += 8) {
    const __m256i sums = rp_qdw_sums8(d, pairs, c);
    if (g->out_type == 0) {
      _mm256_storeu_si256((__m256i*)(g->out + at + c), sums);
      continue;
    }
    const __m128i w = rp_qdw_words(d, sums, c, at, add);
    __m128i bytes = g->out_type == 1 ? _mm_packus_epi16(w, w) : _mm_packs_epi16(w, w);
    if (g->lut) bytes = _mm256_castsi256_si128(rp_qgemm_lookup32(g, _mm256_set_m128i(_mm_setzero_si128(), bytes)));
    _mm_storel_epi64((__m128i*)((uint8_t*)g->qout + at + c), bytes);
  }
  return c;
}

__attribute__((target("avx2")))
static void rp_qdw_pixels4(const rp_qdw* d, const int16_t* const* pairs, int64_t at, int64_t c) {
  if (d->g.residual) rp_qdw_pixels4_avx2(d, pairs, at, c, 1);
  else rp_qdw_pixels4_avx2(d, pairs, at, c, 0);
}

/* four pixels' 16 channels without a residual on AVX-512: rp_qdw_words' operations in the
   same order on 16 channels at a time (the same bits), stored as the AVX-512 GEMM finish
   stores them (rp_qgemm_store16: VPMOVDB of values clamped to the type's range), the four
   pixels' 64 bytes looked up in the table at once (rp_qgemm_store16_lut) */
static inline __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi"), always_inline)) void
rp_qdw_pixels4_512(const rp_qdw* d, const int16_t* const* pairs, int64_t at, int64_t c) {
  const rp_qgemm* g = &d->g;
  const int64_t channels = g->image->channels;
  __m512i sums[4];
  rp_qdw_sums512(d, pairs, c, sums);
  if (g->out_type == 0) {
    for (int i = 0; i < 4; i++) _mm512_storeu_si512((void*)(g->out + at + i * channels + c), sums[i]);
    return;
  }
  const __m512 scale = _mm512_loadu_ps(d->scale + c), low = _mm512_set1_ps(d->low), high = _mm512_set1_ps(d->high);
  const __m512i zero = _mm512_set1_epi32(g->out_zero);
  rp_qgemm_pending pending = {{_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()},
                              {0, 0, 0, 0}, {0, 0, 0, 0}, 0};
  for (int i = 0; i < 4; i++) {
    const __m512 scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(sums[i]), scale);
    const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(scaled, low), high)), zero);
    uint8_t* out = (uint8_t*)g->qout + at + i * channels + c;
    if (g->lut) rp_qgemm_store16_lut(g, &pending, out, 0xFFFF, q);  /* the fourth looks the four up */
    else rp_qgemm_store16(g, &pending, out, 0xFFFF, q);
  }
}

__attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
static void rp_qdw_pixels4_vnni(const rp_qdw* d, const int16_t* const* pairs, int64_t at, int64_t c) {
  if (d->g.residual) rp_qdw_pixels4_avx512(d, pairs, at, c, 1);
  else if (c + 16 <= d->g.image->channels) rp_qdw_pixels4_512(d, pairs, at, c);
  else rp_qdw_pixels4_avx512(d, pairs, at, c, 0);
}

__attribute__((target("avx2")))
static int64_t rp_qdw_pixel(const rp_qdw* d, const int16_t* const* pairs, int64_t at, int64_t first) {
  return d->g.residual ? rp_qdw_pixel_avx2(d, pairs, at, first, 1) : rp_qdw_pixel_avx2(d, pairs, at, first, 0);
}

/* channel c of one output pixel at `at` whose taps are `taps`, in C (body 10, and the
   channels past whole blocks of 8) */
static void rp_qdw_channel(const rp_qdw* d, const uint8_t* const* taps, int64_t c, int64_t at) {
  const int64_t channels = d->g.image->channels;
  uint32_t sum = d->fixed[c];
  for (int64_t t = 0; t < d->taps; t++) {
    const int32_t x = d->a_signed ? (int32_t)(int8_t)taps[t][c] : (int32_t)taps[t][c];
    sum += (uint32_t)(x * (int32_t)d->centered[t * channels + c]);
  }
  const rp_qgemm* g = &d->g;
  if (g->out_type == 0) g->out[at + c] = (int32_t)sum;
  else ((uint8_t*)g->qout)[at + c] = (uint8_t)rp_qgemm_output(g, rp_qgemm_requantize_value(g, d->scale[c], sum),
                                                              at + c);
}

/* the taps of the output pixel whose window's corner is (top, left) in `image`: their
   channels, or the row of za for a tap in the padding */
static void rp_qdw_taps(const rp_qdw* d, const uint8_t* image, int64_t top, int64_t left, const uint8_t** taps) {
  const rp_qgemm_image* c = d->g.image;
  const int64_t span_h = (c->kh - 1) * c->dh, span_w = (c->kw - 1) * c->dw;
  if (top >= 0 && top + span_h < c->height && left >= 0 && left + span_w < c->width) {
    const uint8_t* corner = image + (top * c->width + left) * c->channels;
    for (int64_t t = 0; t < d->taps; t++) taps[t] = corner + d->offsets[t];
    return;
  }
  for (int64_t ky = 0, t = 0; ky < c->kh; ky++) {
    const int64_t h = top + ky * c->dh;
    for (int64_t kx = 0; kx < c->kw; kx++, t++) {
      const int64_t x = left + kx * c->dw;
      taps[t] = h >= 0 && h < c->height && x >= 0 && x < c->width ? image + (h * c->width + x) * c->channels : d->pad;
    }
  }
}

/* the channels from `first` of output pixel (r, ow), in C */
static void rp_qdw_pixel_c(const rp_qdw* d, const uint8_t** taps, int64_t r, int64_t ow, int64_t first) {
  const rp_qgemm_image* c = d->g.image;
  const uint8_t* image = d->data + r / c->out_height * c->height * c->width * c->channels;
  rp_qdw_taps(d, image, r % c->out_height * c->sh - c->top, ow * c->sw - c->left, taps);
  for (int64_t channel = first; channel < c->channels; channel++)
    rp_qdw_channel(d, taps, channel, (r * c->out_width + ow) * c->channels);
}

/* body 10: output rows [begin, end) (of batch * out_height) in C */
static int rp_qdw_rows(void* ctx, int64_t begin, int64_t end) {
  const rp_qdw* d = (const rp_qdw*)ctx;
  const uint8_t** taps = (const uint8_t**)malloc((size_t)d->taps * sizeof(void*));
  if (!taps) return -1;
  for (int64_t r = begin; r < end; r++)
    for (int64_t ow = 0; ow < d->g.image->out_width; ow++) rp_qdw_pixel_c(d, taps, r, ow, 0);
  free(taps);
  return 0;
}

/* padded row h (h - top in the image) of `image` widened into `row`: per entry e (padded
   column e, e - left in the image) and whole block of 8 channels, the values of pixels e
   and e + dw side by side as int16, za in the padding */
__attribute__((target("avx2")))
static void rp_qdw_widen(const rp_qdw* d, const uint8_t* image, int64_t h, int16_t* row) {
  const rp_qgemm_image* c = d->g.image;
  const int64_t ih = h - c->top, channels = c->channels, blocks = channels / 8 * 8;
  const uint8_t* line = ih >= 0 && ih < c->height ? image + ih * c->width * channels : 0;
  /* an even stride reads even entries only (e = ow * sw + 2j * dw) */
  const int64_t every = c->sw % 2 == 0 ? 2 : 1;
  for (int64_t e = 0; e < d->entries; e += every, row += every * channels * RP_QDW_PAIR) {
    const int64_t x0 = e - c->left, x1 = x0 + c->dw;
    const uint8_t* a = line && x0 >= 0 && x0 < c->width ? line + x0 * channels : d->pad;
    const uint8_t* b = line && x1 >= 0 && x1 < c->width ? line + x1 * channels : d->pad;
    for (int64_t k = 0; k < blocks; k += 8) {
      const __m128i bytes = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i*)(a + k)),
                                              _mm_loadl_epi64((const __m128i*)(b + k)));
      _mm256_storeu_si256((__m256i*)(row + k * RP_QDW_PAIR),
                          d->a_signed ? _mm256_cvtepi8_epi16(bytes) : _mm256_cvtepu8_epi16(bytes));
    }
  }
}

/* body 9: output rows [begin, end), each input row widened once into the ring (its slot:
   the padded row modulo the ring); four pixels' blocks of 16 channels at once (a row's last
   pixels with the three before them, which are stored twice, the same), then each pixel's
   blocks of 8, then its channels past them in C */
static int rp_qdw_widened_rows(const rp_qdw* d, int64_t begin, int64_t end) {
  const rp_qgemm_image* c = d->g.image;
  const int64_t row_values = d->entries * c->channels * RP_QDW_PAIR;
  int16_t* ring = (int16_t*)malloc((size_t)(d->ring * row_values) * sizeof(int16_t));
  const uint8_t** taps = (const uint8_t**)malloc((size_t)d->taps * sizeof(void*));
  const int16_t** starts = (const int16_t**)malloc((size_t)(2 * d->pair_count) * sizeof(void*));
  if (!ring || !taps || !starts) {
    free(ring), free(taps), free(starts);
    return -1;
  }
  const int16_t** pairs = starts + d->pair_count;
  int64_t held[RP_QDW_RING];  /* the (image, padded row) of each slot */
  for (int64_t i = 0; i < d->ring; i++) held[i] = -1;
  const int64_t padded_height = c->top + c->height + (c->out_height - 1) * c->sh + (c->kh - 1) * c->dh + 1;
  const int64_t pixel_values = c->sw * c->channels * RP_QDW_PAIR;
  for (int64_t r = begin; r < end; r++) {
    const int64_t n = r / c->out_height, oh = r % c->out_height;
    const uint8_t* image = d->data + n * c->height * c->width * c->channels;
    /* pair p's first pixel in its widened row for the row's first output pixel */
    for (int64_t ky = 0; ky < c->kh; ky++) {
      const int64_t h = oh * c->sh + ky * c->dh, slot = h % d->ring, key = n * padded_height + h;
      if (held[slot] != key) rp_qdw_widen(d, image, h, ring + slot * row_values), held[slot] = key;
      for (int64_t j = 0; j < d->row_pairs; j++)
        starts[ky * d->row_pairs + j] = ring + slot * row_values + 2 * j * c->dw * c->channels * RP_QDW_PAIR;
    }
    const int64_t first_pixel = r * c->out_width;
    /* a block of 16 channels over the row's pixels, four at a time, then the next block (its
       part of the widened rows read from the L1 cache: a 5x5 layer of 576 channels has a
       ring of 127 KiB; level on a Zen 3 with all blocks of four pixels before the next four) */
    const int64_t quads_done = c->out_width >= 4 ? c->channels / 8 * 8 : 0;
    for (int64_t k = 0; k < quads_done; k += 16)
      for (int64_t ow = 0; ow < c->out_width; ow += 4) {  /* the row's last four: some again, the same values */
        const int64_t start = ow + 4 <= c->out_width ? ow : c->out_width - 4;
        for (int64_t p = 0; p < d->pair_count; p++) pairs[p] = starts[p] + start * pixel_values;
        if (d->vnni) rp_qdw_pixels4_vnni(d, pairs, (first_pixel + start) * c->channels, k);
        else rp_qdw_pixels4(d, pairs, (first_pixel + start) * c->channels, k);
      }
    for (int64_t ow = 0; quads_done < c->channels && ow < c->out_width; ow++) {  /* channels left */
      const int64_t at = (first_pixel + ow) * c->channels;
      for (int64_t p = 0; p < d->pair_count; p++) pairs[p] = starts[p] + ow * pixel_values;
      const int64_t done = rp_qdw_pixel(d, pairs, at, quads_done);
      if (done < c->channels) rp_qdw_pixel_c(d, taps, r, ow, done);
    }
  }
  free(ring), free(taps), free(starts);
  return 0;
}

/* body 9 by bands [begin, end) of the output rows, a band's rows sharing a ring: a band a
   thread, not the pool's finer chunks, which would widen again the rows each one's windows
   span (a 5x5 layer of 14 rows in 8 chunks widened 48 rows for 18) */
static int rp_qdw_widened_bands(void* ctx, int64_t begin, int64_t end) {
  const rp_qdw* d = (const rp_qdw*)ctx;
  for (int64_t band = begin; band < end; band++)
    if (rp_qdw_widened_rows(d, d->rows * band / d->bands, d->rows * (band + 1) / d->bands) != 0) return -1;
  return 0;
}

/* w' = w - zb of the weight B [taps, channels] (of its type), zb as int16 in `zero`, of the
   channels from `first` into `centered`, and each one's sum of them into `total` */
static void rp_qdw_center(const void* B, const int16_t* zero, int b_signed, int64_t taps, int64_t channels,
                          int64_t first, int16_t* centered, uint32_t* total) {
  for (int64_t c = first; c < channels; c++) {
    uint32_t sum = 0;
    for (int64_t t = 0; t < taps; t++) {
      const int32_t w = b_signed ? ((const int8_t*)B)[t * channels + c] : ((const uint8_t*)B)[t * channels + c];
      centered[t * channels + c] = (int16_t)(w - zero[c]);
      sum += (uint32_t)(w - zero[c]);
    }
    total[c] = sum;
  }
}

/* the same of the whole blocks of 8 channels as body 9 reads them (`pairs`): the taps (kx,
   kx + 1) of each filter row a pair, a last odd one paired with a weight of 0 */
__attribute__((target("avx2")))
static void rp_qdw_pairs_avx2(const rp_qdw* d, const void* B, const int16_t* zero, int b_signed, int16_t* pairs,
                              uint32_t* total) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t channels = d->g.image->channels, kw = d->g.image->kw;
  const uint8_t* w = (const uint8_t*)B;
  for (int64_t c = 0; c + 8 <= channels; c += 8) {
    /* the 8 zero points, each twice: (zb, zb) of a pair */
    const __m128i z = _mm_loadu_si128((const __m128i*)(zero + c));
    const __m256i zz = _mm256_set_m128i(_mm_unpackhi_epi16(z, z), _mm_unpacklo_epi16(z, z));
    __m256i sum = _mm256_setzero_si256();
    for (int64_t p = 0; p < d->pair_count; p++) {
      const int64_t kx = p % d->row_pairs * 2, first = p / d->row_pairs * kw + kx;
      const int paired = kx + 1 < kw;
      const __m128i w0 = _mm_loadl_epi64((const __m128i*)(w + first * channels + c));
      const __m128i w1 = paired ? _mm_loadl_epi64((const __m128i*)(w + (first + 1) * channels + c))
                                : _mm_setzero_si128();
      const __m128i bytes = _mm_unpacklo_epi8(w0, w1);
      __m256i v = _mm256_sub_epi16(b_signed ? _mm256_cvtepi8_epi16(bytes) : _mm256_cvtepu8_epi16(bytes), zz);
      /* a missing odd tap's weight is 0, not 0 - zb */
      if (!paired) v = _mm256_blend_epi16(v, _mm256_setzero_si256(), 0xAA);
      _mm256_storeu_si256((__m256i*)(pairs + (c / 8 * d->pair_count + p) * 16), v);
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(v, ones));
    }
    _mm256_storeu_si256((__m256i*)(total + c), sum);
  }
}

/* rp_qconv_i8 of a depthwise convolution (see above); level: the instruction-set level */
static int rp_qdw_run(const void* image, const rp_qgemm_image* geometry, const void* B, const void* za,
                      const void* zb, void* out, int64_t batch, int64_t a_signed, int64_t b_signed,
                      int64_t zb_step, const rp_qgemm_epilogue* epilogue, int level) {
  const int64_t channels = geometry->channels, taps = geometry->kh * geometry->kw;
  const int64_t ring = (geometry->kh - 1) * geometry->dh + 1, row_pairs = (geometry->kw + 1) / 2;
  /* body 9: AVX2, whole blocks of 8 channels, a filter of at most RP_QDW_RING rows */
  const int widened = level >= 1 && channels >= 8 && ring <= RP_QDW_RING;
  const int64_t blocks = widened ? channels / 8 : 0, pair_count = geometry->kh * row_pairs;
  /* one allocation: w' and its pairs (int16), the zero points (int16), the constants, the
     multipliers, the taps' offsets, the row of za */
  const size_t centered_bytes = (size_t)(taps * channels) * 2, pairs_bytes = (size_t)(blocks * pair_count * 16) * 2;
  const size_t words = centered_bytes + pairs_bytes + (size_t)channels * 2;
  const size_t words_aligned = (words + 7) / 8 * 8;
  uint8_t* memory = (uint8_t*)malloc(words_aligned + (size_t)channels * 8 + (size_t)taps * 8 + (size_t)channels);
  if (!memory) return -1;
  int16_t* centered = (int16_t*)memory;
  int16_t* pairs = (int16_t*)(memory + centered_bytes);
  int16_t* zero = (int16_t*)(memory + centered_bytes + pairs_bytes);
  uint32_t* fixed = (uint32_t*)(memory + words_aligned);
  float* scale = (float*)(fixed + channels);
  int64_t* offsets = (int64_t*)(scale + channels);
  uint8_t* pad = (uint8_t*)(offsets + taps);
  rp_qdw d;
  memset(&d, 0, sizeof d);
  uint8_t lut_rows[RP_QGEMM_LUT_ROWS * 32];
  rp_qgemm_set_epilogue(&d.g, epilogue, out, lut_rows);
  d.g.image = geometry, d.g.ld = channels;
  d.data = (const uint8_t*)image, d.pad = pad, d.offsets = offsets, d.centered = centered, d.pairs = pairs;
  d.fixed = fixed, d.scale = scale, d.taps = taps, d.row_pairs = row_pairs, d.pair_count = pair_count;
  d.a_signed = (int)a_signed, d.widened = widened, d.ring = ring;
  d.vnni = widened && level == 2 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vl");
  d.entries = (geometry->out_width - 1) * geometry->sw + (geometry->kw - 1) * geometry->dw + 1;
  const int32_t qmin = epilogue->out_type == 2 ? -128 : 0, qmax = epilogue->out_type == 2 ? 127 : 255;
  d.low = (float)(qmin - d.g.out_zero), d.high = (float)(qmax - d.g.out_zero);
  memset(pad, *(const uint8_t*)za, (size_t)channels);
  for (int64_t ky = 0, t = 0; ky < geometry->kh; ky++)
    for (int64_t kx = 0; kx < geometry->kw; kx++, t++)
      offsets[t] = (ky * geometry->dh * geometry->width + kx * geometry->dw) * channels;
  for (int64_t c = 0; c < channels; c++)
    zero[c] = (int16_t)(b_signed ? ((const int8_t*)zb)[c * zb_step] : ((const uint8_t*)zb)[c * zb_step]);
  /* fixed: the sums of w' first */
  if (widened) rp_qdw_pairs_avx2(&d, B, zero, (int)b_signed, pairs, fixed);
  rp_qdw_center(B, zero, (int)b_signed, taps, channels, blocks * 8, centered, fixed);
  const int32_t za_value = a_signed ? *(const int8_t*)za : *(const uint8_t*)za;
  const int quantize = epilogue->out_type != 0;
  for (int64_t c = 0; c < channels; c++) {
    const uint32_t bias = quantize && epilogue->bias_kind
                              ? (uint32_t)((const int32_t*)epilogue->bias)[epilogue->bias_kind == 2 ? c : 0] : 0;
    fixed[c] = bias - (uint32_t)za_value * fixed[c];
    scale[c] = quantize ? ((const float*)epilogue->multiplier)[c * epilogue->multiplier_step] : 0.0f;
  }
  __atomic_add_fetch(&rp_qgemm_calls[widened ? 9 : 10], 1, __ATOMIC_RELAXED);
  const int64_t threads = raypass_get_num_threads();
  /* an output row's work: body 9's as measured (RP_QDW_SLOTS_PER_WORK), body 10's its
     multiply-adds */
  const int64_t row_work = widened ? geometry->out_width * channels * (2 * pair_count + RP_QDW_PIXEL_SLOTS) /
                                             RP_QDW_SLOTS_PER_WORK + 1
                                   : geometry->out_width * channels * taps / RP_MACS_PER_WORK + 1;
  d.rows = batch * geometry->out_height, d.bands = threads < d.rows ? threads : d.rows;
  const int status = widened ? rp_parallel_for(rp_qdw_widened_bands, &d, d.bands, row_work * d.rows / d.bands)
                             : rp_parallel_for(rp_qdw_rows, &d, d.rows, row_work);
  free(memory);
  return status < 0 ? -1 : 0;
}

static int rp_qgemm_run(const void* A, const rp_qgemm_image* image, const void* B, const void* za,
                        const void* zb, void* out, int64_t M, int64_t N, int64_t K, int64_t a_signed,
                        int64_t b_signed, int64_t za_step, int64_t zb_step, int64_t b_packed, int64_t groups,
                        const rp_qgemm_epilogue* epilogue) {
  if (M <= 0 || N <= 0 || groups <= 0) return 0;
  __builtin_cpu_init();
  const int level = raypass_conv_isa(-1);  /* the level in effect (detected once) */
  if (image && N == 1 && groups > 1 && groups == image->channels && !b_packed && b_signed != 2)
    return rp_qdw_run(A, image, B, za, zb, out, M / (image->out_height * image->out_width), a_signed, b_signed,
                      zb_step, epilogue, level);
  const int64_t rows = groups * M;
  uint32_t* rowsum = (uint32_t*)calloc((size_t)rows, sizeof(uint32_t));
  const int64_t width = rp_qgemm_width(N), panels = (N + width - 1) / width;
  /* AVX2: VPMADDUBSW where every pair of the stored weight fits (the first panel's flag; a
     decode step's one row too: its panels' bytes as stored, not widened, 1-3% faster) */
  const int64_t K4 = (K + 3) / 4 * 4;
  const int pairs_fit = b_packed && ((const uint8_t*)B)[K4 * width + width * 4] == 1;
  /* b_signed 2: pairs that saturate (a weight whose pairs do not all fit): only the bodies
     that add them as VPMADDUBSW does run, by it (7, 8) or in C (0), on every CPU */
  const int saturating = b_signed == 2 && !pairs_fit;
  const int vnni = !saturating && level == 2 && __builtin_cpu_supports("avx512vnni") &&
                   __builtin_cpu_supports("avx512bw");
  const int centered = rp_qgemm_centered(zb, (int)b_signed, zb_step ? groups * N : 1);
  /* AVX-VNNI where AVX2 is the level and the CPU has it (not under RAYPASS_MAX_ISA=avx2,
     which runs as an AVX2-only CPU would) */
  const int avxvnni = !saturating && level == 1 && !rp_isa_capped() && __builtin_cpu_supports("avxvnni");
  /* a convolution of narrow groups whose channels are whole quads: the direct body, where
     there is VNNI (its A' is no copy); else A' is made first (AMX: in its tiles) */
  const int64_t cg = image ? K / (image->kh * image->kw) : 0;
  const int narrow_image = image && width == RP_QGEMM_NARROW && cg % 4 == 0 && centered;
  /* VPMADDUBSW's sums are the result: every pair fits, or pairs saturate */
  const int ubs = pairs_fit || saturating;
  /* and on a narrow image without VNNI, the direct body by VPMADDUBSW (8): RegNet's
     grouped 3x3 convolutions spent longer in the im2col copy than in the products */
  const int fits_direct = narrow_image && level >= 1 && !vnni && !avxvnni && ubs;
  const int direct = (narrow_image && (vnni || avxvnni)) || fits_direct;
  /* AMX where a row's k fill more than half its first step of 64 (fewer run on VNNI, whose
     rows are 16 k apart: a pointwise convolution of 16 or 32 channels and an RGB stem's 27
     k were 1.1-1.6x slower on AMX, in the model, on a Sapphire Rapids; 40 level, 48 and
     more faster) */
  const int amx = !direct && vnni && M >= 16 && K > RP_QGEMM_DEPTH / 2 && rp_qgemm_amx_usable();
  /* A's row stride in A': whole steps of 64 k where AMX reads it, else whole vectors of 16
     (the other bodies read K4 k of it: a pointwise convolution of 16 channels made and
     widened rows of 64, four times what it reads) */
  const int64_t step = amx ? RP_QGEMM_DEPTH : RP_QGEMM_VECTOR, Kp = (K + step - 1) / step * step;
  int body = fits_direct ? 8 : direct ? (vnni ? 4 : 6) : amx ? 3 : vnni ? 2 : avxvnni ? 5 : level >= 1 ? 1 : 0;
  if (body == 1 && ubs) body = 7;
  __atomic_add_fetch(&rp_qgemm_calls[body], 1, __ATOMIC_RELAXED);
  /* VPMADDUBSW reads a uint8 A in place where it is A' (a pointwise convolution's data, a
     projection's): no copy, no row sums */
  const int in_place = body == 7 && !image && !a_signed && K % 4 == 0 && centered && groups == 1;
  /* row mode (as many row blocks as panels, or more): each work item keeps its block's A'
     in buffers of its own (rp_qgemm_row_blocks); else A' of every row first, here */
  const int rowwise = (M + RP_QGEMM_BLOCK_ROWS - 1) / RP_QGEMM_BLOCK_ROWS >= panels;
  const int64_t block_rows = rp_qgemm_block_rows(M, groups * (rowwise ? 1 : panels));
  const int64_t blocks = (M + block_rows - 1) / block_rows;
  /* AMX: whole steps of rows, zeros past M */
  const int64_t tile_rows = (M + RP_QGEMM_AMX_ROWS - 1) / RP_QGEMM_AMX_ROWS * RP_QGEMM_AMX_ROWS;
  const int shared = !rowwise && !direct && !in_place, wide = body == 1;
  uint8_t* tiles = shared && amx ? (uint8_t*)malloc((size_t)(groups * tile_rows * Kp)) : 0;
  int16_t* A16 = shared && wide ? (int16_t*)malloc((size_t)(rows * Kp) * sizeof(int16_t)) : 0;
  /* zeros past each row's bytes: rp_qgemm_prepare writes only those (AMX reads the tiles only) */
  uint8_t* Au = shared && !amx ? (uint8_t*)calloc((size_t)(rows * Kp), 1) : 0;
  uint8_t* pad_row = direct ? (uint8_t*)malloc((size_t)cg) : 0;
  if ((shared && ((!amx && !Au) || (amx && !tiles) || (wide && !A16))) || !rowsum || (direct && !pad_row)) {
    free(Au), free(rowsum), free(tiles), free(A16), free(pad_row);
    return -1;
  }
  if (direct) memset(pad_row, *(const uint8_t*)za, (size_t)cg);
  /* the tiles' rows past M (a last step of fewer rows) are zeros */
  for (int64_t group = 0; tiles && group < groups && tile_rows > M; group++)
    for (int64_t row = M; row < tile_rows; row++)
      for (int64_t k = 0; k < Kp; k += RP_QGEMM_DEPTH)
        memset(tiles + group * tile_rows * Kp + ((row / 16 * (Kp / RP_QGEMM_DEPTH) + k / RP_QGEMM_DEPTH) * 16 +
                                                  row % 16) * RP_QGEMM_DEPTH, 0, RP_QGEMM_DEPTH);
  rp_qgemm_operand operand = {(const uint8_t*)A, image, image ? *(const uint8_t*)za : 0, Au, tiles, rowsum,
                               A16, M, K, Kp, 0, M, tile_rows, (uint8_t)(a_signed ? 0x80 : 0), level >= 1,
                               amx, 1, 0, cg};
  /* (the epilogue's fields: rp_qgemm_set_epilogue) */
  rp_qgemm g = {Au, rowsum, A16, tiles, (const uint8_t*)B, 0, za, zb, 0, 0, 0, 0, 0, 0, 0, 0,
                M, N, K, Kp, za_step, zb_step, groups * N, groups, width, 0, M, tile_rows, (int)a_signed,
                (int)b_signed, (int)b_packed, body, (K + 3) / 4 * 4, image, direct ? (const uint8_t*)A : 0,
                pad_row, (uint8_t)(a_signed ? 0x80 : 0), 0, 0, Kp, in_place, block_rows, 0, 0.0f, 0.0f, 0.0f, 0,
                groups * panels * RP_QGEMM_PANEL((K + 3) / 4 * 4, width) >= RP_QGEMM_STREAM_BYTES, 0, 0, 0};
  uint8_t lut_rows[RP_QGEMM_LUT_ROWS * 32];
  rp_qgemm_set_epilogue(&g, epilogue, out, lut_rows);
  g.vbmi = vnni && __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vl");
  operand.rowsums = !centered;
  if (in_place) g.A = (const uint8_t*)A, g.a_stride = K;
  /* a uint8 A of whole 64-byte steps (A' is A), no row sums, one group: AMX reads its whole
     steps of rows in place, and only a last partial step is copied into tiles */
  if (amx && !image && !a_signed && K % RP_QGEMM_DEPTH == 0 && centered && groups == 1) {
    g.rows = (const uint8_t*)A, g.rows_full = M / RP_QGEMM_AMX_ROWS * RP_QGEMM_AMX_ROWS;
    operand.copy_from = g.rows_full;
  }
  uint8_t* packed = 0;
  int status = 0;
  if (!b_packed) {  /* B as given: packed once, the panels shared by every row block */
    packed = (uint8_t*)malloc((size_t)(groups * panels * RP_QGEMM_PANEL(g.K4, width)));
    g.packed = packed;
    status = packed ? rp_parallel_for(rp_qgemm_pack_panels, &g, groups * panels, g.K4 * width / 64 + 1)
                    : -1;
    g.B = packed, g.b_packed = 1;
  }
  /* work units of about a nanosecond: a row of A' is some K / 32 vector steps; a block by
     a panel block_rows * K * 32 multiply-adds */
  const int64_t prepare_work = block_rows * (K / 32 + 1);
  const int64_t panel_work = block_rows * K * width / RP_MACS_PER_WORK + 1;
  if (status == 0 && rowwise) {
    rp_qgemm_rowwise rowwise = {&g, &operand};
    rp_qgemm_claims claims = {&rowwise, groups * blocks, 0};
    status = rp_parallel_for(rp_qgemm_row_blocks, &claims, claims.extent, prepare_work + panels * panel_work);
  } else if (status == 0) {
    if (!direct && !in_place) status = rp_parallel_for(rp_qgemm_prepare, &operand, rows, K / 32 + 1);
    rp_qgemm_claims claims = {&g, groups * blocks * panels, 0};
    if (status == 0) status = rp_parallel_for(rp_qgemm_blocks, &claims, claims.extent, panel_work);
  }
  free(packed);
  free(Au), free(rowsum), free(tiles), free(A16), free(pad_row);
  return status < 0 ? -1 : 0;
}

/* the epilogue arguments of the entry points: bias (int32), multiplier (float) and the
   output's zero point, bias_kind (0: none, 1: one, 2: per column), multiplier_step (0: one,
   1: per column), out_type (0: out is int32, the sums; 1: uint8, 2: int8, requantized);
   the _add variants: then adding `residual` (laid out as out, of its type) to the values by
   qnn.add (QLinearAdd): (lhs_scale, lhs_zero) and (rhs_scale, rhs_zero) its operands'
   quantization, the requantized values' and the residual's (the residual its lhs where
   residual_first), (add_scale, add_zero) the sum's; the _lut variants: then looking each
   value up in `table` (256 values of the output's type, from the type's lowest) */
#define RP_QGEMM_EPILOGUE_PARAMETERS                                                                    \
  const void *bias, const void *multiplier, const void *out_zero, int64_t bias_kind, int64_t multiplier_step, \
      int64_t out_type
#define RP_QGEMM_RESIDUAL_PARAMETERS                                                                    \
  const void *residual, float lhs_scale, int64_t lhs_zero, float rhs_scale, int64_t rhs_zero, float add_scale, \
      int64_t add_zero, int64_t residual_first
#define RP_QGEMM_MATRIX_PARAMETERS                                                                      \
  const void *A, const void *B, const void *za, const void *zb, void *out, int64_t M, int64_t N, int64_t K,  \
      int64_t a_signed, int64_t b_signed, int64_t za_step, int64_t zb_step, int64_t b_packed, int64_t groups
#define RP_QGEMM_IMAGE_PARAMETERS                                                                       \
  const void *image, const void *B, const void *za, const void *zb, void *out, int64_t batch, int64_t height, \
      int64_t width, int64_t channels, int64_t out_height, int64_t out_width, int64_t kh, int64_t kw,        \
      int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t top, int64_t left, int64_t N, int64_t groups,   \
      int64_t a_signed, int64_t b_signed, int64_t zb_step, int64_t b_packed

int rp_qgemm_add_lut_i8(RP_QGEMM_MATRIX_PARAMETERS, RP_QGEMM_EPILOGUE_PARAMETERS, RP_QGEMM_RESIDUAL_PARAMETERS,
                        const void* table) {
  const rp_qgemm_epilogue epilogue = {bias, multiplier, out_zero, bias_kind, multiplier_step, out_type,
                                      residual, lhs_scale, rhs_scale, add_scale, lhs_zero, rhs_zero, add_zero,
                                      residual_first, table};
  return rp_qgemm_run(A, 0, B, za, zb, out, M, N, K, a_signed, b_signed, za_step, zb_step, b_packed, groups,
                      &epilogue);
}

/* `groups` GEMMs of one shape in one call (1: one GEMM): see rp_qgemm_run */
int rp_qgemm_i8(RP_QGEMM_MATRIX_PARAMETERS, RP_QGEMM_EPILOGUE_PARAMETERS) {
  return rp_qgemm_add_lut_i8(A, B, za, zb, out, M, N, K, a_signed, b_signed, za_step, zb_step, b_packed, groups,
                             bias, multiplier, out_zero, bias_kind, multiplier_step, out_type,
                             0, 0.0f, 0, 0.0f, 0, 0.0f, 0, 0, 0);
}

int rp_qgemm_add_i8(RP_QGEMM_MATRIX_PARAMETERS, RP_QGEMM_EPILOGUE_PARAMETERS, RP_QGEMM_RESIDUAL_PARAMETERS) {
  return rp_qgemm_add_lut_i8(A, B, za, zb, out, M, N, K, a_signed, b_signed, za_step, zb_step, b_packed, groups,
                             bias, multiplier, out_zero, bias_kind, multiplier_step, out_type, residual,
                             lhs_scale, lhs_zero, rhs_scale, rhs_zero, add_scale, add_zero, residual_first, 0);
}

int rp_qgemm_lut_i8(RP_QGEMM_MATRIX_PARAMETERS, RP_QGEMM_EPILOGUE_PARAMETERS, const void* table) {
  return rp_qgemm_add_lut_i8(A, B, za, zb, out, M, N, K, a_signed, b_signed, za_step, zb_step, b_packed, groups,
                             bias, multiplier, out_zero, bias_kind, multiplier_step, out_type,
                             0, 0.0f, 0, 0.0f, 0, 0.0f, 0, 0, table);
}

/* The convolution of an NHWC image [batch, height, width, channels] (int8, a_signed 1, or
   uint8) with za its one zero point, by an HWIO weight as rp_qgemm_i8's B: the GEMMs of
   its im2col matrix (gathered here, row by row: the padding holds za, so it adds
   nothing), `groups` of them, each of kh * kw * channels / groups rows of B and N
   columns (a depthwise one, N 1 and a group a channel: the depthwise bodies); out NHWC
   [batch, out_height, out_width, groups * N], int32 or requantized. */
int rp_qconv_add_lut_i8(RP_QGEMM_IMAGE_PARAMETERS, RP_QGEMM_EPILOGUE_PARAMETERS, RP_QGEMM_RESIDUAL_PARAMETERS,
                        const void* table) {
  const rp_qgemm_image geometry = {height, width, channels, out_height, out_width, kh, kw, sh, sw, dh, dw, top, left};
  const rp_qgemm_epilogue epilogue = {bias, multiplier, out_zero, bias_kind, multiplier_step, out_type,
                                      residual, lhs_scale, rhs_scale, add_scale, lhs_zero, rhs_zero, add_zero,
                                      residual_first, table};
  return rp_qgemm_run(image, &geometry, B, za, zb, out, batch * out_height * out_width, N,
                      kh * kw * (channels / groups), a_signed, b_signed, 0, zb_step, b_packed, groups, &epilogue);
}

int rp_qconv_i8(RP_QGEMM_IMAGE_PARAMETERS, RP_QGEMM_EPILOGUE_PARAMETERS) {
  return rp_qconv_add_lut_i8(image, B, za, zb, out, batch, height, width, channels, out_height, out_width, kh, kw,
                             sh, sw, dh, dw, top, left, N, groups, a_signed, b_signed, zb_step, b_packed, bias,
                             multiplier, out_zero, bias_kind, multiplier_step, out_type,
                             0, 0.0f, 0, 0.0f, 0, 0.0f, 0, 0, 0);
}

int rp_qconv_add_i8(RP_QGEMM_IMAGE_PARAMETERS, RP_QGEMM_EPILOGUE_PARAMETERS, RP_QGEMM_RESIDUAL_PARAMETERS) {
  return rp_qconv_add_lut_i8(image, B, za, zb, out, batch, height, width, channels, out_height, out_width, kh, kw,
                             sh, sw, dh, dw, top, left, N, groups, a_signed, b_signed, zb_step, b_packed, bias,
                             multiplier, out_zero, bias_kind, multiplier_step, out_type, residual, lhs_scale,
                             lhs_zero, rhs_scale, rhs_zero, add_scale, add_zero, residual_first, 0);
}

int rp_qconv_lut_i8(RP_QGEMM_IMAGE_PARAMETERS, RP_QGEMM_EPILOGUE_PARAMETERS, const void* table) {
  return rp_qconv_add_lut_i8(image, B, za, zb, out, batch, height, width, channels, out_height, out_width, kh, kw,
                             sh, sw, dh, dw, top, left, N, groups, a_signed, b_signed, zb_step, b_packed, bias,
                             multiplier, out_zero, bias_kind, multiplier_step, out_type,
                             0, 0.0f, 0, 0.0f, 0, 0.0f, 0, 0, table);
}

/* ----------------------------------------------------------------------------- lookups */
/* out[i] = table[indices[i]] for i < count: a take of a table of 256 bytes (QuantizedLookupTables')
   by uint8 indices, which no loop nest vectorizes; 32 at a time by rp_lookup32 on AVX2 */
typedef struct {
  const uint8_t* table;
  const uint8_t* indices;
  uint8_t* out;
  const uint8_t* rows;  /* the table's rows for VPSHUFB (rp_qgemm_lut_rows) */
  int64_t count;
  int avx2;
} rp_lookup;

#define RP_LOOKUP_CHUNK 4096

__attribute__((target("avx2")))
static int64_t rp_lookup_avx2(const rp_lookup* l, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 32 <= end; i += 32)
    _mm256_storeu_si256((__m256i*)(l->out + i),
                        rp_lookup32(l->rows, _mm256_loadu_si256((const __m256i*)(l->indices + i))));
  return i;
}

static int rp_lookup_chunks(void* ctx, int64_t begin, int64_t end) {
  const rp_lookup* l = (const rp_lookup*)ctx;
  const int64_t first = begin * RP_LOOKUP_CHUNK, last = end * RP_LOOKUP_CHUNK < l->count ? end * RP_LOOKUP_CHUNK
                                                                                          : l->count;
  for (int64_t i = l->avx2 ? rp_lookup_avx2(l, first, last) : first; i < last; i++) l->out[i] = l->table[l->indices[i]];
  return 0;
}

int rp_lookup_u8(const void* table, const void* indices, void* out, int64_t count) {
  __builtin_cpu_init();
  uint8_t rows[RP_QGEMM_LUT_ROWS * 32];
  rp_qgemm_lut_rows((const uint8_t*)table, rows);
  const rp_lookup l = {(const uint8_t*)table, (const uint8_t*)indices, (uint8_t*)out, rows, count,
                       raypass_conv_isa(-1) >= 1};
  return rp_parallel_for(rp_lookup_chunks, (void*)&l, (count + RP_LOOKUP_CHUNK - 1) / RP_LOOKUP_CHUNK,
                         RP_LOOKUP_CHUNK / 8) < 0 ? -1 : 0;
}
