/* raypass runtime: convolution microkernels (see passinfra/codegen/conv_runtime.py) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

#if !defined(RP_CHANNEL_CHUNK) || !defined(RP_UNIT_PIXELS) || !defined(RP_MACS_PER_WORK) || \
    !defined(RP_ZERO_RUN) || !defined(RP_ROW_WINDOW)
#error "the tunables come from passinfra/codegen/conv_runtime.py (runtime_defines), or -D on the command line"
#endif

#define CB RP_CHANNEL_CHUNK

typedef struct {
  const float* image;
  const float* weight;
  int64_t H, W, C, OC, KH, KW, sh, sw, dh, dw, pt, pl, OW;
  int64_t CS;  /* floats from one input pixel to the next: C, or every group's channels */
  int64_t ON;  /* output channels of this call from the weight's and output's column 0 (OC, or a group's) */
  /* the weight's layout: output channel o of row r (of KH*KW*C) is at
     (o / PB) * PBS + r * LDW + o % PB; HWIO in place: PB = LDW = OC, PBS = 0; panels of
     B channels: PB = LDW = B, PBS = KH*KW*C*B */
  int64_t LDW, PB, PBS;
  /* the input channels a pass over the tiles sums: one chunk (c_begin a multiple of CB)
     or all of them; from the second chunk on a tile adds to what ``out`` holds */
  int64_t c_begin, c_end;
  const struct rp_conv_epi* epi;  /* the call's epilogue, applied as the last chunk's tiles store; or NULL */
  int64_t ch;  /* the output channel of the span's first column (its group's offset in): the bias's */
} rp_conv;

/* The element-wise epilogue of a convolution call (passinfra.codegen.compute.conv_epilogue),
   applied to a tile's sums in registers before they are stored, where a loop over the
   stored rows read and wrote every output once more (MobileNetV3-like: 12% of its
   time). Per output, in float32 and in this order: the bias of its channel, the residual
   (the same element of a tensor laid out as the output; before the bias where the graph
   adds it first), then the activation, with the max and min of the code generator's
   own (an operand that is NaN is kept): relu max(x, 0), clip min(max(x, p0), p1), hard-
   swish x * min(max(x * p0 + p1, 0), 1). Every instruction set computes the same
   operations in the same order: the same bits as the loop it replaces. */
typedef struct rp_conv_epi {
  const float* out0;      /* the call's output pointer: a tile's offset from it is its residual's */
  const float* bias;      /* [OC], or NULL */
  const float* residual;  /* from the element at out0's, or NULL */
  int residual_first, act;
  float p0, p1;
} rp_conv_epi;
enum { RP_ACT_NONE = 0, RP_ACT_RELU = 1, RP_ACT_CLIP = 2, RP_ACT_HARDSWISH = 3 };
/* the flags argument of rp_conv2d_f32_epi: the activation in the low bits, then these */
#define RP_EPI_ACT_MASK 15
#define RP_EPI_BIAS 16
#define RP_EPI_RESIDUAL 32
#define RP_EPI_RESIDUAL_FIRST 64

/* the code generator's max and min (c_renderer: rp_vmax_f32, rp_vmin_f32): an operand x that
   is NaN is kept, and x where it equals c */
static inline float rp_epi_max1(float x, float c) { return (x > c || x != x) ? x : c; }
static inline float rp_epi_min1(float x, float c) { return (x < c || x != x) ? x : c; }

/* the epilogue of output element ``off`` (from out0), of channel ``ch``, whose sum is x */
static inline float rp_epi1(const rp_conv_epi* e, float x, int64_t off, int64_t ch) {
  if (e->bias && !e->residual_first) x = x + e->bias[ch];
  if (e->residual) x = x + e->residual[off];
  if (e->bias && e->residual_first) x = x + e->bias[ch];
  switch (e->act) {
    case RP_ACT_RELU: return rp_epi_max1(x, 0.0f);
    case RP_ACT_CLIP: return rp_epi_min1(rp_epi_max1(x, e->p0), e->p1);
    case RP_ACT_HARDSWISH: {
      float t = x * e->p0;
      t = t + e->p1;
      return x * rp_epi_min1(rp_epi_max1(t, 0.0f), 1.0f);
    }
    default: return x;
  }
}

/* The same on 8 and 16 lanes, one instruction each: vmaxps(c, x) is c > x ? c : x, and x
   where either is NaN, so it keeps a NaN x as the code generator's max does and differs
   from it only where x and c are equal but for the sign of zero. That cannot happen here:
   c is never -0.0 (conv_epilogue takes no such constant) and x never -0.0 either, being a
   sum begun at +0.0 (a round-to-nearest sum is -0.0 only if every term is), plus a bias and
   a residual (+0.0 + -0.0 is +0.0), or the hard-swish's x * p0 + p1 (p1 not -0.0), or a
   max's or min's result of those. */
__attribute__((target("avx2,fma"))) static inline __m256 rp_epi_max256(__m256 x, __m256 c) {
  return _mm256_max_ps(c, x);
}
__attribute__((target("avx2,fma"))) static inline __m256 rp_epi_min256(__m256 x, __m256 c) {
  return _mm256_min_ps(c, x);
}

__attribute__((target("avx512f"))) static inline __m512 rp_epi_max512(__m512 x, __m512 c) {
  return _mm512_max_ps(c, x);
}
__attribute__((target("avx512f"))) static inline __m512 rp_epi_min512(__m512 x, __m512 c) {
  return _mm512_min_ps(c, x);
}

/* whether this pass over a tile's channels is its last: the epilogue then applies */
#define RP_EPI_NOW(g) ((g)->epi && (g)->c_end == (g)->C)

/* The epilogue on a tile's PX x NV accumulators (vectors of type V), step by step over
   all of them: each decision is taken once a tile, not once a vector (per vector, the
   branches cost more than the loop they replace). BIAS(v): the bias of vector v's
   channels; RES(p, v): the residual of accumulator [p][v] (both through the tile's
   offset off_ from the call's first output and its first channel ch_ = CH, masked as its
   last vector). NOW: whether the tile's sums are final. */
#define RP_EPI_TERM(PX, NV, ADD, TERM) \
  _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) { \
    _Pragma("GCC unroll 16") for (int p = 0; p < PX; p++) acc[p][v] = ADD(acc[p][v], TERM); \
  }
#define RP_EPI_APPLY(NOW, CH, PX, NV, V, ADD, MUL, MAX, MIN, SET1, BIAS, RES) \
  if (NOW) { \
    const rp_conv_epi* e_ = g->epi; \
    const int64_t off_ = out - e_->out0, ch_ = (CH); \
    (void)ch_; \
    if (e_->bias && !e_->residual_first) RP_EPI_TERM(PX, NV, ADD, BIAS(v)) \
    if (e_->residual) RP_EPI_TERM(PX, NV, ADD, RES(p, v)) \
    if (e_->bias && e_->residual_first) RP_EPI_TERM(PX, NV, ADD, BIAS(v)) \
    if (e_->act == RP_ACT_RELU) { \
      const V zero_ = SET1(0.0f); \
      RP_EPI_TERM(PX, NV, MAX, zero_) \
    } else if (e_->act == RP_ACT_CLIP) { \
      const V lo_ = SET1(e_->p0), hi_ = SET1(e_->p1); \
      RP_EPI_TERM(PX, NV, MAX, lo_) \
      RP_EPI_TERM(PX, NV, MIN, hi_) \
    } else if (e_->act == RP_ACT_HARDSWISH) { \
      const V a_ = SET1(e_->p0), b_ = SET1(e_->p1), zero_ = SET1(0.0f), one_ = SET1(1.0f); \
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) \
        _Pragma("GCC unroll 16") for (int p = 0; p < PX; p++) { \
          V t_ = ADD(MUL(acc[p][v], a_), b_); \
          acc[p][v] = MUL(acc[p][v], MIN(MAX(t_, zero_), one_)); \
        } \
    } \
  }

/* a tap outside the image reads these (a whole row of taps, when the row is merged) */
#define RP_ZEROS RP_ZERO_RUN
static const float rp_conv_zeros[RP_ZEROS] __attribute__((aligned(64)));

/* The input position of tap (0, 0) of each pixel of the tile (flat output pixels q0 ..;
   one division per tile: a tile of a small convolution is a few hundred cycles), and
   whether every pixel's row of taps lies inside the image's columns. */
#define RP_TAP_SETUP(PX) \
  int64_t iy0[PX], ix0[PX]; \
  int columns_inside = 1; \
  { \
    int64_t oy = q0 / g->OW, ox = q0 - oy * g->OW; \
    for (int p = 0; p < PX; p++) { \
      iy0[p] = oy * g->sh - g->pt; ix0[p] = ox * g->sw - g->pl; \
      columns_inside &= ix0[p] >= 0 && ix0[p] + (g->KW - 1) * g->dw < g->W; \
      if (++ox == g->OW) { ox = 0; oy++; } \
    } \
  }

/* A row of taps is one run of KW*C input values per pixel when the taps are adjacent
   (dilation 1), every pixel's row lies inside the image's columns and the channels are
   one chunk: the tap columns and channels are then one loop (the same products in the
   same order as tap by tap), which is what makes a stem of 3 channels fast. */
#define RP_MERGED(g) ((g)->dw == 1 && (g)->CS == (g)->C && (g)->C <= CB && (g)->KW * (g)->C <= RP_ZEROS)

/* Sets rowp[p] (input row of pixel p at tap row ry, channel c0; NULL outside the image)
   and skips the tap row (continue) when it lies outside for every pixel. */
#define RP_TAP_ROW(PX) \
  const float* rowp[PX]; int inside = 0; \
  for (int p = 0; p < PX; p++) { \
    int64_t iy = iy0[p] + ry * g->dh; \
    rowp[p] = (iy >= 0 && iy < g->H) ? g->image + iy * g->W * g->CS + c0 : 0; \
    inside |= rowp[p] != 0; \
  } \
  if (!inside) continue;

/* The sum over a tap row: STEP(ap, wp, n) accumulates n channels read through ap[p]
   against the weight rows from wp. */
#define RP_TAP_ROW_SUM(PX, STEP) \
  if (merged) { \
    const float* ap[PX]; \
    for (int p = 0; p < PX; p++) ap[p] = rowp[p] ? rowp[p] + ix0[p] * g->CS : rp_conv_zeros; \
    const float* wp = g->weight + ry * g->KW * g->C * g->LDW + wo; \
    STEP(ap, wp, g->KW * g->C) \
  } else { \
    for (int64_t rx = 0; rx < g->KW; rx++) { \
      const float* ap[PX]; \
      for (int p = 0; p < PX; p++) { \
        int64_t ix = ix0[p] + rx * g->dw; \
        ap[p] = (rowp[p] && ix >= 0 && ix < g->W) ? rowp[p] + ix * g->CS : rp_conv_zeros; \
      } \
      const float* wp = g->weight + ((ry * g->KW + rx) * g->C + c0) * g->LDW + wo; \
      STEP(ap, wp, cn) \
    } \
  }

/* The loops of a tile around STEP: channel chunks, tap rows, the tap row's sum. */
#define RP_TILE_LOOPS(PX, STEP) \
  RP_TAP_SETUP(PX) \
  const int merged = columns_inside && RP_MERGED(g); \
  const int64_t wo = (ob / g->PB) * g->PBS + ob % g->PB; /* the block's first weight column */ \
  for (int64_t c0 = g->c_begin; c0 < g->c_end; c0 += CB) { \
    int64_t cn = g->c_end - c0 < CB ? g->c_end - c0 : CB; \
    for (int64_t ry = 0; ry < g->KH; ry++) { \
      RP_TAP_ROW(PX) \
      RP_TAP_ROW_SUM(PX, STEP) \
    } \
  }

/* ---------------------------------------------------------------- AVX-512F: 8 x 32 */
#define RP_STEPS512(ap, wp, LOAD_LAST) \
  for (int64_t c = 0; c < n_; c++) { \
    __m512 b[NV_]; \
    _Pragma("GCC unroll 2") for (int v = 0; v < NV_; v++) \
      b[v] = v == NV_ - 1 ? LOAD_LAST((wp) + c * ldw_ + 16 * v) : _mm512_loadu_ps((wp) + c * ldw_ + 16 * v); \
    _Pragma("GCC unroll 8") for (int p = 0; p < PX_; p++) { \
      __m512 x = _mm512_set1_ps((ap)[p][c]); \
      _Pragma("GCC unroll 2") for (int v = 0; v < NV_; v++) acc[p][v] = _mm512_fmadd_ps(x, b[v], acc[p][v]); \
    } \
  }
#define RP_LOAD_TAIL512(p) _mm512_maskz_loadu_ps(tail, p)
/* (the step count and weight stride in locals, a whole last vector loaded unmasked: as in
   the row tiles' RP_ROW_SUM512 below) */
#define RP_STEP512_BODY(ap, wp, n) { \
    const int64_t n_ = (n), ldw_ = g->LDW; \
    if (tail == (__mmask16)0xFFFF) RP_STEPS512(ap, wp, _mm512_loadu_ps) \
    else RP_STEPS512(ap, wp, RP_LOAD_TAIL512) \
  }

/* the bias and residual vectors of an AVX-512 tile's epilogue (the last vector masked) */
#define RP_EPI_MASK512(v) ((v) == NV_ - 1 ? tail : (__mmask16)0xFFFF)
#define RP_EPI_BIAS512(v) _mm512_maskz_loadu_ps(RP_EPI_MASK512(v), e_->bias + ch_ + 16 * (v))
#define RP_EPI_RES512(p, v) _mm512_maskz_loadu_ps(RP_EPI_MASK512(v), e_->residual + off_ + (p) * g->OC + 16 * (v))

/* An AVX-512 tile function of PX pixels x NV vectors: zeroed accumulators, BODY, then
   the stores (the last vector masked to the block's channels). */
#define RP_TILE512_FUNCTION(NAME, PX, NV, BODY) \
__attribute__((target("avx512f"))) static void NAME( \
    const rp_conv* g, int64_t q0, int64_t ob, float* out, __mmask16 tail) { \
  enum { PX_ = PX, NV_ = NV }; \
  __m512 acc[PX][NV]; \
  _Pragma("GCC unroll 16") for (int p = 0; p < PX; p++) \
    _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) \
      acc[p][v] = !g->c_begin ? _mm512_setzero_ps() \
                  : v == NV - 1 ? _mm512_maskz_loadu_ps(tail, out + p * g->OC + 16 * v) \
                                : _mm512_loadu_ps(out + p * g->OC + 16 * v); \
  BODY \
  RP_EPI_APPLY(RP_EPI_NOW(g), g->ch, PX, NV, __m512, _mm512_add_ps, _mm512_mul_ps, rp_epi_max512, rp_epi_min512, _mm512_set1_ps, \
               RP_EPI_BIAS512, RP_EPI_RES512) \
  _Pragma("GCC unroll 16") for (int p = 0; p < PX; p++) \
    _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) { \
      if (v == NV - 1) _mm512_mask_storeu_ps(out + p * g->OC + 16 * v, tail, acc[p][v]); \
      else _mm512_storeu_ps(out + p * g->OC + 16 * v, acc[p][v]); \
    } \
}

#define RP_TILE512(PX, NV) \
  RP_TILE512_FUNCTION(rp_tile512_##PX##_##NV, PX, NV, RP_TILE_LOOPS(PX, RP_STEP512_BODY))

/* ------------------------------------------- AVX-512F: row tiles, 16 x 16 and 12 x 32
   The tiles above keep one input pointer per pixel, because a tile may span output rows;
   with 8 pixels those pointers fill the general registers. On pixels of one output row,
   pixel p reads the input at src + p*sw*(column stride): four pointers serve any number
   of pixels, so a row tile has 16 pixels of one vector of channels (16 accumulators) or
   12 of two (24), and pays the fixed cost of a tile (tap setup, pointers, stores) per
   more multiply-adds. Kernel alone, one thread, GFLOP/s (8-pixel tiles -> row tiles):
   3x3 16->16 at 32x32 88 -> 94, at 112x112 90 -> 102; 1x1 16->16 at 32x32 53 -> 78; 3x3
   64->64 at 56x56 103 -> 111; 1x1 64->64 at 56x56 90 -> 103; 3x3 128->128 at 28x28 107
   -> 112. A row tile whose taps reach past the image's columns reads a copy of its window
   with zeros for the padding (RP_WINDOW floats at most; a larger window takes the
   8-pixel tiles). Every output sums the same products in the same order as in the
   8-pixel tiles: which tile computes a pixel changes no bit. */
#define RP_WINDOW RP_ROW_WINDOW

/* the window columns a row tile of PX pixels reads per tap row */
#define RP_ROW_SPAN(g, PX) (((PX) - 1) * (g)->sw + ((g)->KW - 1) * (g)->dw + 1)

/* One pointer per quarter of the tile, each stepping one float: pixel 4i+j reads
   q[i] + j*S, an address the instruction forms itself (base + S*1, S*2 or 3S*1), so the
   loop keeps its accumulators without running out of general registers. */
#define RP_ROW_STEPS512(LOAD_LAST) \
    for (int64_t k = 0; k < n_; k++, w_ += ldw_) { \
      __m512 b[NV_]; \
      _Pragma("GCC unroll 2") for (int v = 0; v < NV_; v++) \
        b[v] = v == NV_ - 1 ? LOAD_LAST(w_ + 16 * v) : _mm512_loadu_ps(w_ + 16 * v); \
      _Pragma("GCC unroll 4") for (int i = 0; i < PX_ / 4; i++) { \
        const float* q = q_[i] + k; \
        const __m512 x0 = _mm512_set1_ps(q[0]), x1 = _mm512_set1_ps(q[S1]); \
        const __m512 x2 = _mm512_set1_ps(q[2 * S1]), x3 = _mm512_set1_ps(q[S3]); \
        _Pragma("GCC unroll 2") for (int v = 0; v < NV_; v++) { \
          acc[4 * i][v] = _mm512_fmadd_ps(x0, b[v], acc[4 * i][v]); \
          acc[4 * i + 1][v] = _mm512_fmadd_ps(x1, b[v], acc[4 * i + 1][v]); \
          acc[4 * i + 2][v] = _mm512_fmadd_ps(x2, b[v], acc[4 * i + 2][v]); \
          acc[4 * i + 3][v] = _mm512_fmadd_ps(x3, b[v], acc[4 * i + 3][v]); \
        } \
      } \
    }
/* The step count and weight stride in locals: as loads of g (g->KW * cn, g->LDW) GCC
   redid them every step. A block whose last vector is whole loads it unmasked: a mask
   register set from a general one every step (KMOVW) took a slot of the port the
   multiply-adds issue on. */
#define RP_ROW_SUM512(a, wp, n, S) { \
    const int64_t S1 = (S), S3 = 3 * (S), n_ = (n), ldw_ = g->LDW; \
    const float* q_[4]; \
    _Pragma("GCC unroll 4") for (int i = 0; i < PX_ / 4; i++) q_[i] = (a) + 4 * i * S1; \
    const float* w_ = (wp); \
    if (tail == (__mmask16)0xFFFF) RP_ROW_STEPS512(_mm512_loadu_ps) \
    else RP_ROW_STEPS512(RP_LOAD_TAIL512) \
  }

/* A row tile's window of one tap row, packed: image columns ix0 .. ix0+span of row (cn
   channels each, from the row's channel c0), zeros outside the image. Inlined, and its copy
   a loop, not memcpy: a call clobbers every vector register, and around it GCC kept the
   row tile's 24 accumulators on the stack, storing and reloading them each tap row (AMD
   EPYC Zen 4, ResNet-50's 3x3 convolutions: twice the AVX2 tiles' time) */
static inline __attribute__((target("avx512f"), always_inline)) void rp_row_window512(
    const rp_conv* g, const float* row, int64_t ix0, int64_t span, int64_t cn, float* window) {
  /* the window's columns jlo .. jhi are inside the image */
  const int64_t jlo = ix0 < 0 ? (-ix0 < span ? -ix0 : span) : 0;
  const int64_t jhi = g->W - ix0 < jlo ? jlo : g->W - ix0 < span ? g->W - ix0 : span;
  /* zeros GCC cannot see are zeros: it turns a loop storing known zeros into a memset call */
  __m512 zero = _mm512_setzero_ps();
  __asm__("" : "+v"(zero));
  for (int64_t i = 0; i < jlo * cn; i += 16) _mm512_storeu_ps(window + i, zero);
  for (int64_t i = jhi * cn; i < span * cn; i += 16) _mm512_storeu_ps(window + i, zero);
  if (g->CS == cn) {  /* the columns are one run */
    const float* from = row + (ix0 + jlo) * cn;
    float* to = window + jlo * cn;
    const int64_t n = (jhi - jlo) * cn;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(to + i, _mm512_loadu_ps(from + i));
    if (i < n) {
      const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
      _mm512_mask_storeu_ps(to + i, m, _mm512_maskz_loadu_ps(m, from + i));
    }
    return;
  }
  for (int64_t j = jlo; j < jhi; j++)
    for (int64_t c = 0; c < cn; c += 16) {
      const __mmask16 m = cn - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cn - c)) - 1u);
      _mm512_mask_storeu_ps(window + j * cn + c, m, _mm512_maskz_loadu_ps(m, row + (ix0 + j) * g->CS + c));
    }
}

/* A 1x1 convolution of stride 1 without padding reads pixel q at image + q*CS, across
   rows too: its row tiles may span output rows (RP_ROW_LINEAR), where the rows of another
   convolution end in the 8-pixel tiles (14 of 14x14's pixels a row: 12 + 2; at 7x7 all
   of them), which ran about 1.4x longer a pixel than the row tiles */
#define RP_POINTWISE(g) ((g)->KH == 1 && (g)->KW == 1 && (g)->sh == 1 && (g)->sw == 1 && \
                         (g)->pt == 0 && (g)->pl == 0 && (g)->W == (g)->OW)

/* the sums of a row tile of PX pixels (its window and tap loops) */
#define RP_ROW512_BODY(PX) \
  const int64_t oy = q0 / g->OW, ix0 = (q0 - oy * g->OW) * g->sw - g->pl, span = RP_ROW_SPAN(g, PX); \
  const int inside = RP_POINTWISE(g) || (ix0 >= 0 && ix0 + span <= g->W); \
  const int64_t wo = (ob / g->PB) * g->PBS + ob % g->PB; \
  float window[RP_WINDOW + 16] __attribute__((aligned(64))); /* zeros go in whole vectors */ \
  for (int64_t c0 = g->c_begin; c0 < g->c_end; c0 += CB) { \
    const int64_t cn = g->c_end - c0 < CB ? g->c_end - c0 : CB; \
    for (int64_t ry = 0; ry < g->KH; ry++) { \
      const int64_t iy = oy * g->sh - g->pt + ry * g->dh; \
      if (iy < 0 || iy >= g->H) continue; \
      const float* row = g->image + iy * g->W * g->CS + c0; \
      const float* src = row + ix0 * g->CS; \
      int64_t cs = g->CS; /* floats from one input column to the next */ \
      if (!inside) { \
        rp_row_window512(g, row, ix0, span, cn, window); \
        src = window, cs = cn; \
      } \
      const int64_t S = g->sw * cs; \
      if (g->dw == 1 && cs == cn && cn == g->C) { /* the row's taps and channels: one run */ \
        const float* wp = g->weight + ry * g->KW * g->C * g->LDW + wo; \
        RP_ROW_SUM512(src, wp, g->KW * cn, S) \
      } else { \
        for (int64_t rx = 0; rx < g->KW; rx++) { \
          const float* wp = g->weight + ((ry * g->KW + rx) * g->C + c0) * g->LDW + wo; \
          RP_ROW_SUM512(src + rx * g->dw * cs, wp, cn, S) \
        } \
      } \
    } \
  }

#define RP_ROW512(PX, NV) RP_TILE512_FUNCTION(rp_row512_##PX##_##NV, PX, NV, RP_ROW512_BODY(PX))

RP_ROW512(16, 1) RP_ROW512(12, 2)
/* [vectors - 1]: the row tile's pixels, and its kernel */
static const int rp_row_px512[2] = {16, 12};
typedef void (*rp_row512_fn)(const rp_conv*, int64_t, int64_t, float*, __mmask16);
static const rp_row512_fn rp_rows512[2] = {rp_row512_16_1, rp_row512_12_2};

/* whether output pixels q .. q+px (flat) can be a row tile: one output row, and a window
   that fits RP_WINDOW unless the taps stay inside the image (any pixels of a pointwise
   convolution) */
static int rp_row_tile_fits(const rp_conv* g, int64_t q, int64_t px) {
  const int64_t ox = q % g->OW, ix0 = ox * g->sw - g->pl, span = RP_ROW_SPAN(g, px);
  if (RP_POINTWISE(g)) return 1;
  if (g->OW - ox < px) return 0;
  return (ix0 >= 0 && ix0 + span <= g->W) || span * (g->C < CB ? g->C : CB) <= RP_WINDOW;
}

/* ------------------------------------------------- AVX2 + FMA: 3 x 32 and 6 x 16
   A block of 32 output channels (a whole panel row: both cache lines of it) runs on
   tiles of 3 pixels x 4 vectors: a step broadcasts the 3 inputs, then loads the weight
   vectors one at a time against them (12 accumulators, 3 inputs and 1 weight: the 16
   registers). The 6 x 16 tiles (12 accumulators, 2 weights, 1 input) read half of each
   panel row, so a block streamed every weight line from L2 twice as often and filled
   only half the cache sets with a panel's lines (a 3x3 512->512 weight block no longer
   fit L2); they serve blocks of up to 16 channels. Kernel alone, one Zen 3 core,
   GFLOP/s, 6 x 16 -> 3 x 32, ResNet-50's shapes: 3x3 512->512 at 7x7 68 -> 83, 1x1
   2048->512 at 7x7 76 -> 92, 1x1 1024->256 at 14x14 87 -> 95, 3x3 64->64 at 56x56 91
   -> 96, the 7x7 stem 63 -> 79; its 53 convolutions 100.6 -> 88.9 ms.
   Each variant has whole vectors of channels (plain loads and stores) or a partial last
   vector (masked ones): vmaskmovps in the inner loop cost whole-vector tiles up to a
   third of their speed on Zen 3. Every tile sums an output's products in one order. */
/* n steps of a tile: X(p, k) is pixel p's input at step k, wp the first weight row. With
   3-4 vectors (3 x 32): the inputs, then one weight vector at a time; with 1-2 (6 x 16):
   the weight vectors, then one input at a time */
#define RP_STEP256_AT(X, wp, n, MASKED) { \
    const int64_t n_ = (n), ldw_ = g->LDW; \
    const float* w_ = (wp); \
    for (int64_t k = 0; k < n_; k++, w_ += ldw_) { \
      if (NV_ > 2) { \
        __m256 x[PX_]; \
        _Pragma("GCC unroll 8") for (int p = 0; p < PX_; p++) x[p] = _mm256_broadcast_ss(X(p, k)); \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV_; v++) { \
          const __m256 b = MASKED && v == NV_ - 1 ? _mm256_maskload_ps(w_ + 8 * v, tail) \
                                                  : _mm256_loadu_ps(w_ + 8 * v); \
          _Pragma("GCC unroll 8") for (int p = 0; p < PX_; p++) acc[p][v] = _mm256_fmadd_ps(x[p], b, acc[p][v]); \
        } \
      } else { \
        __m256 b[NV_]; \
        _Pragma("GCC unroll 2") for (int v = 0; v < NV_; v++) \
          b[v] = MASKED && v == NV_ - 1 ? _mm256_maskload_ps(w_ + 8 * v, tail) : _mm256_loadu_ps(w_ + 8 * v); \
        _Pragma("GCC unroll 8") for (int p = 0; p < PX_; p++) { \
          const __m256 x = _mm256_broadcast_ss(X(p, k)); \
          _Pragma("GCC unroll 2") for (int v = 0; v < NV_; v++) acc[p][v] = _mm256_fmadd_ps(x, b[v], acc[p][v]); \
        } \
      } \
    } \
  }
/* the tiles that keep a pointer per pixel (the array the tile loops name ``ap``) */
#define RP_X_POINTERS(p, k) (ap[p] + (k))
#define RP_STEP256_FULL(ap, wp, n) RP_STEP256_AT(RP_X_POINTERS, wp, n, 0)
#define RP_STEP256_MASKED(ap, wp, n) RP_STEP256_AT(RP_X_POINTERS, wp, n, 1)

/* An AVX2 tile's PX x NV accumulators, zeroed (from the second chunk of channels on,
   loaded from ``out``), with the mask of its last vector's lanes (``lanes`` of them), and
   their stores at the end (the last vector masked if MASKED) */
#define RP_ACC256_INIT(PX, NV, MASKED) \
  enum { PX_ = PX, NV_ = NV, MASKED_ = MASKED }; \
  __m256 acc[PX][NV]; \
  const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), \
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); \
  (void)tail; \
  _Pragma("GCC unroll 8") for (int p = 0; p < PX; p++) \
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) \
      acc[p][v] = !g->c_begin ? _mm256_setzero_ps() \
                  : MASKED && v == NV - 1 ? _mm256_maskload_ps(out + p * g->OC + 8 * v, tail) \
                                          : _mm256_loadu_ps(out + p * g->OC + 8 * v);
/* the bias and residual vectors of an AVX2 tile's epilogue (the last vector masked if MASKED) */
#define RP_EPI_LOAD256(ptr, v) (MASKED_ && (v) == NV_ - 1 ? _mm256_maskload_ps((ptr), tail) : _mm256_loadu_ps(ptr))
#define RP_EPI_BIAS256(v) RP_EPI_LOAD256(e_->bias + ch_ + 8 * (v), v)
#define RP_EPI_RES256(p, v) RP_EPI_LOAD256(e_->residual + off_ + (p) * g->OC + 8 * (v), v)
#define RP_ACC256_STORE(PX, NV, MASKED) \
  RP_EPI_APPLY(RP_EPI_NOW(g), g->ch, PX, NV, __m256, _mm256_add_ps, _mm256_mul_ps, rp_epi_max256, rp_epi_min256, _mm256_set1_ps, \
               RP_EPI_BIAS256, RP_EPI_RES256) \
  _Pragma("GCC unroll 8") for (int p = 0; p < PX; p++) \
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) { \
      if (MASKED && v == NV - 1) _mm256_maskstore_ps(out + p * g->OC + 8 * v, tail, acc[p][v]); \
      else _mm256_storeu_ps(out + p * g->OC + 8 * v, acc[p][v]); \
    }

#define RP_TILE256_VARIANT(NAME, PX, NV, MASKED, STEP) \
__attribute__((target("avx2,fma"))) static void NAME( \
    const rp_conv* g, int64_t q0, int64_t ob, float* out, int lanes) { \
  RP_ACC256_INIT(PX, NV, MASKED) \
  RP_TILE_LOOPS(PX, STEP) \
  RP_ACC256_STORE(PX, NV, MASKED) \
}

/* 3 x 32 (and 3 x 24) tiles, and 6 x 16 (and 6 x 8) ones */
#define RP_TILE256(PX, NV) \
  RP_TILE256_VARIANT(rp_tile256_##PX##_##NV, PX, NV, 0, RP_STEP256_FULL) \
  RP_TILE256_VARIANT(rp_tile256m_##PX##_##NV, PX, NV, 1, RP_STEP256_MASKED)

/* AVX2 row tiles: the pixels of a tile in one output row, their taps inside the image's
   columns. Pixel p reads the input at src + p*S (S = stride x column stride): one pointer
   per three pixels and S in a register serve them (q, q + S, q + 2S are addressing modes),
   the tap row is checked once for every pixel, and a tap costs a pointer and a weight
   row instead of a bounds check per pixel. The same products in the same order as the
   tiles above (merged tap rows too). One Zen 3 core, kernel alone (C harness, min of 5
   interleaved rounds), GFLOP/s: 3x3 16->16 at 32x32 73 -> 86, 16->64 at 55x55 89 -> 96, the
   7x7 stride-2 stem 79 -> 91; whole models, one thread: resnet20 1.53 -> 1.46 ms,
   RegNetX-like 6.31 -> 6.09 ms. */
/* pixel p reads q_[p / 3] + (p % 3) * S1: two pointers and S1 for up to six pixels */
#define RP_X_ROW(p, k) (q_[(p) / 3] + (k) + ((p) % 3) * S1)
#define RP_ROW_STEP256(a, wp, n, S, MASKED) { \
    const int64_t S1 = (S); \
    const float* q_[2] = {(a), (a) + 3 * S1}; \
    RP_STEP256_AT(RP_X_ROW, wp, n, MASKED) \
  }

#define RP_ROW256_VARIANT(NAME, PX, NV, MASKED) \
__attribute__((target("avx2,fma"))) static void NAME( \
    const rp_conv* g, int64_t q0, int64_t ob, float* out, int lanes) { \
  RP_ACC256_INIT(PX, NV, MASKED) \
  const int64_t oy = q0 / g->OW, ix0 = (q0 - oy * g->OW) * g->sw - g->pl; \
  const int64_t wo = (ob / g->PB) * g->PBS + ob % g->PB, S = g->sw * g->CS; \
  for (int64_t c0 = g->c_begin; c0 < g->c_end; c0 += CB) { \
    const int64_t cn = g->c_end - c0 < CB ? g->c_end - c0 : CB; \
    for (int64_t ry = 0; ry < g->KH; ry++) { \
      const int64_t iy = oy * g->sh - g->pt + ry * g->dh; \
      if (iy < 0 || iy >= g->H) continue; \
      const float* src = g->image + (iy * g->W + ix0) * g->CS + c0; \
      if (g->dw == 1 && g->CS == cn && cn == g->C) { /* the row's taps and channels: one run */ \
        RP_ROW_STEP256(src, g->weight + ry * g->KW * g->C * g->LDW + wo, g->KW * cn, S, MASKED) \
      } else { \
        for (int64_t rx = 0; rx < g->KW; rx++) { \
          const float* wp = g->weight + ((ry * g->KW + rx) * g->C + c0) * g->LDW + wo; \
          RP_ROW_STEP256(src + rx * g->dw * g->CS, wp, cn, S, MASKED) \
        } \
      } \
    } \
  } \
  RP_ACC256_STORE(PX, NV, MASKED) \
}
#define RP_ROW256(PX, NV) \
  RP_ROW256_VARIANT(rp_row256_##PX##_##NV, PX, NV, 0) RP_ROW256_VARIANT(rp_row256m_##PX##_##NV, PX, NV, 1)
RP_ROW256(6, 1) RP_ROW256(6, 2) RP_ROW256(3, 3) RP_ROW256(3, 4)
typedef void (*rp_row256_fn)(const rp_conv*, int64_t, int64_t, float*, int);
/* [masked][vectors - 1]: the full-width row tile of each vector count */
static const rp_row256_fn rp_rows256[2][4] = {
  {rp_row256_6_1, rp_row256_6_2, rp_row256_3_3, rp_row256_3_4},
  {rp_row256m_6_1, rp_row256m_6_2, rp_row256m_3_3, rp_row256m_3_4}};

/* whether output pixels q .. q+px (flat) are in one output row whose taps stay inside the
   image's columns */
static int rp_row_inside(const rp_conv* g, int64_t q, int64_t px) {
  const int64_t ox = q % g->OW, ix0 = ox * g->sw - g->pl;
  return g->OW - ox >= px && ix0 >= 0 && ix0 + ((px - 1) * g->sw + (g->KW - 1) * g->dw + 1) <= g->W;
}

/* A pointwise convolution (1x1, stride 1, no padding, rows as wide as the image's) reads
   pixel q's channels at image + q*CS: a GEMM whose tiles need no tap setup. Its tiles take
   their input pointers from the span's loop, so a tile of a short sum (16-64 channels)
   does not spend a fifth of its time finding them; each output sums the same products in
   the same order as the tiles above. Kernel alone, one Zen 3 core, GFLOP/s, tiles ->
   pointwise: 16->64 at 55x55 57 -> 81, 24->144 at 56x56 65 -> 86, 32->128 at 27x27 73 ->
   90, 64->256 at 56x56 85 -> 97, 96->576 at 14x14 85 -> 93. The matmuls on the
   microkernels (passinfra.codegen.compute.conv_microkernel.matmul_call) are pointwise. */
#define RP_PW256_VARIANT(NAME, PX, NV, MASKED, STEP) \
__attribute__((target("avx2,fma"))) static void NAME( \
    const rp_conv* g, const float* a, const float* wp, float* out, int lanes) { \
  RP_ACC256_INIT(PX, NV, MASKED) \
  const float* ap[PX]; \
  _Pragma("GCC unroll 8") for (int p = 0; p < PX; p++) ap[p] = a + p * g->CS; \
  STEP(ap, wp, g->C) \
  RP_ACC256_STORE(PX, NV, MASKED) \
}
#define RP_PW256(PX, NV) \
  RP_PW256_VARIANT(rp_pw256_##PX##_##NV, PX, NV, 0, RP_STEP256_FULL) \
  RP_PW256_VARIANT(rp_pw256m_##PX##_##NV, PX, NV, 1, RP_STEP256_MASKED)
RP_PW256(1, 1) RP_PW256(2, 1) RP_PW256(3, 1) RP_PW256(4, 1)
RP_PW256(5, 1) RP_PW256(6, 1)
RP_PW256(1, 2) RP_PW256(2, 2) RP_PW256(3, 2) RP_PW256(4, 2)
RP_PW256(5, 2) RP_PW256(6, 2)
RP_PW256(1, 3) RP_PW256(2, 3) RP_PW256(3, 3) RP_PW256(1, 4) RP_PW256(2, 4) RP_PW256(3, 4)
typedef void (*rp_pw256_fn)(const rp_conv*, const float*, const float*, float*, int);
/* [masked][vectors - 1][pixels] of the AVX2 tiles named W_PX_NV (whole vectors) and
   M_PX_NV (the last one masked): up to 6 pixels of 1-2 vectors, 3 of 3-4 */
#define RP_TILES256(W, M) { \
  {{0, W##_1_1, W##_2_1, W##_3_1, W##_4_1, W##_5_1, W##_6_1}, \
   {0, W##_1_2, W##_2_2, W##_3_2, W##_4_2, W##_5_2, W##_6_2}, \
   {0, W##_1_3, W##_2_3, W##_3_3}, {0, W##_1_4, W##_2_4, W##_3_4}}, \
  {{0, M##_1_1, M##_2_1, M##_3_1, M##_4_1, M##_5_1, M##_6_1}, \
   {0, M##_1_2, M##_2_2, M##_3_2, M##_4_2, M##_5_2, M##_6_2}, \
   {0, M##_1_3, M##_2_3, M##_3_3}, {0, M##_1_4, M##_2_4, M##_3_4}}}
static const rp_pw256_fn rp_pws256[2][4][7] = RP_TILES256(rp_pw256, rp_pw256m);

/* ---------------------------------------------------------------- portable C: 4 x 8 */
#define RP_STEP_C_BODY(ap, wp, n) \
  for (int64_t c = 0; c < (n); c++) \
    for (int p = 0; p < PX_; p++) \
      for (int v = 0; v < lanes; v++) acc[p][v] += (ap)[p][c] * (wp)[c * g->LDW + v];

#define RP_TILE_C(PX) \
static void rp_tile_c_##PX(const rp_conv* g, int64_t q0, int64_t ob, float* out, int lanes) { \
  enum { PX_ = PX }; \
  float acc[PX][8] = {{0}}; \
  if (g->c_begin) \
    for (int p = 0; p < PX; p++) \
      for (int v = 0; v < lanes; v++) acc[p][v] = out[p * g->OC + v]; \
  RP_TILE_LOOPS(PX, RP_STEP_C_BODY) \
  if (RP_EPI_NOW(g)) \
    for (int p = 0; p < PX; p++) \
      for (int v = 0; v < lanes; v++) \
        acc[p][v] = rp_epi1(g->epi, acc[p][v], out + p * g->OC + v - g->epi->out0, g->ch + v); \
  for (int p = 0; p < PX; p++) \
    for (int v = 0; v < lanes; v++) out[p * g->OC + v] = acc[p][v]; \
}

RP_TILE512(1, 1) RP_TILE512(2, 1) RP_TILE512(3, 1) RP_TILE512(4, 1)
RP_TILE512(5, 1) RP_TILE512(6, 1) RP_TILE512(7, 1) RP_TILE512(8, 1)
RP_TILE512(1, 2) RP_TILE512(2, 2) RP_TILE512(3, 2) RP_TILE512(4, 2)
RP_TILE512(5, 2) RP_TILE512(6, 2) RP_TILE512(7, 2) RP_TILE512(8, 2)
RP_TILE256(1, 1) RP_TILE256(2, 1) RP_TILE256(3, 1) RP_TILE256(4, 1)
RP_TILE256(5, 1) RP_TILE256(6, 1)
RP_TILE256(1, 2) RP_TILE256(2, 2) RP_TILE256(3, 2) RP_TILE256(4, 2)
RP_TILE256(5, 2) RP_TILE256(6, 2)
RP_TILE256(1, 3) RP_TILE256(2, 3) RP_TILE256(3, 3) RP_TILE256(1, 4) RP_TILE256(2, 4) RP_TILE256(3, 4)
RP_TILE_C(1) RP_TILE_C(2) RP_TILE_C(3) RP_TILE_C(4)

/* [vectors - 1][pixels]. Wider tiles lose: each pixel of a tile keeps its input pointer
   in a register (16 pixels of one vector of channels ran 30-40 GFLOP/s against 49-84
   with 8, the pointers spilled) */
typedef void (*rp_tile512_fn)(const rp_conv*, int64_t, int64_t, float*, __mmask16);
typedef void (*rp_tile_fn)(const rp_conv*, int64_t, int64_t, float*, int);
static const rp_tile512_fn rp_tiles512[2][9] = {
  {0, rp_tile512_1_1, rp_tile512_2_1, rp_tile512_3_1, rp_tile512_4_1,
   rp_tile512_5_1, rp_tile512_6_1, rp_tile512_7_1, rp_tile512_8_1},
  {0, rp_tile512_1_2, rp_tile512_2_2, rp_tile512_3_2, rp_tile512_4_2,
   rp_tile512_5_2, rp_tile512_6_2, rp_tile512_7_2, rp_tile512_8_2}};
static const rp_tile_fn rp_tiles256[2][4][7] = RP_TILES256(rp_tile256, rp_tile256m);
static const rp_tile_fn rp_tiles_c[5] = {0, rp_tile_c_1, rp_tile_c_2, rp_tile_c_3, rp_tile_c_4};

/* -1: not detected yet */
static int rp_conv_level = -1;

/* RAYPASS_MAX_ISA caps the level: the machine runs as a CPU without the higher ones would
   (avx2: AVX2 and FMA only, so no VNNI either: the integer GEMM's AVX-VNNI body is off) */
static int rp_conv_cap(void) {
  const char* cap = getenv("RAYPASS_MAX_ISA");
  if (cap && !strcmp(cap, "portable")) return 0;
  if (cap && !strcmp(cap, "avx2")) return 1;
  return 2;
}

static int rp_conv_supported(void) {
  int cap = rp_conv_cap(), cpu = 0;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) cpu = 2;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) cpu = 1;
  return cpu < cap ? cpu : cap;
}

/* whether RAYPASS_MAX_ISA caps this process below AVX-512 (qgemm.c: no AVX-VNNI then) */
int rp_isa_capped(void) { return rp_conv_cap() < 2; }

int raypass_conv_isa(int level) {
  int supported = rp_conv_supported();
  if (level >= 0) __atomic_store_n(&rp_conv_level, level < supported ? level : supported, __ATOMIC_RELAXED);
  else if (__atomic_load_n(&rp_conv_level, __ATOMIC_RELAXED) < 0)
    __atomic_store_n(&rp_conv_level, supported, __ATOMIC_RELAXED);
  return __atomic_load_n(&rp_conv_level, __ATOMIC_RELAXED);
}

/* the tiles of a span (one pass over its channels: g->c_begin .. g->c_end) */
static void rp_conv_tiles(const rp_conv* g, int level, int64_t ob, int64_t q0, int64_t n, float* out,
                          int lanes, int vectors, int tile) {
  for (int64_t q = 0; q < n; q += tile) {
    int px = n - q < tile ? (int)(n - q) : tile;
    float* at = out + q * g->OC + ob;
    const int64_t row_px = level == 2 ? rp_row_px512[vectors - 1] : 0;
    if (row_px && n - q >= row_px && rp_row_tile_fits(g, q0 + q, row_px)) {
      rp_rows512[vectors - 1](g, q0 + q, ob, at, (__mmask16)((1u << (lanes - 16 * (vectors - 1))) - 1u));
      q += row_px - tile;
    } else if (level == 2)
      rp_tiles512[vectors - 1][px](g, q0 + q, ob, at, (__mmask16)((1u << (lanes - 16 * (vectors - 1))) - 1u));
    else if (level == 1 && px == tile && rp_row_inside(g, q0 + q, tile))
      rp_rows256[lanes != 8 * vectors][vectors - 1](g, q0 + q, ob, at, lanes - 8 * (vectors - 1));
    else if (level == 1)
      rp_tiles256[lanes != 8 * vectors][vectors - 1][px](g, q0 + q, ob, at, lanes - 8 * (vectors - 1));
    else
      rp_tiles_c[px](g, q0 + q, ob, at, lanes);
  }
}

/* Output pixels q0 .. q0+n (flat), channels ob .. ob+block of one block, into out (pixel q0). */
static void rp_conv_span(const rp_conv* g, int level, int64_t ob, int64_t q0, int64_t n, float* out) {
  rp_conv with_channel;
  if (g->epi) {  /* the tiles' bias starts at the block's channel */
    with_channel = *g;
    with_channel.ch += ob;
    g = &with_channel;
  }
  const int block = level ? 32 : 8;
  const int lanes = g->ON - ob < block ? (int)(g->ON - ob) : block;
  /* vectors of the block: AVX-512 one or two of 16, AVX2 one to four of 8 */
  const int vectors = level == 2 ? (lanes > 16 ? 2 : 1) : level == 1 ? (lanes + 7) / 8 : 1;
  const int tile = level == 2 ? 8 : level == 1 ? (vectors > 2 ? 3 : 6) : 4;
  if (level == 1 && RP_POINTWISE(g)) {
    const rp_pw256_fn* tiles = rp_pws256[lanes != 8 * vectors][vectors - 1];
    const float* wp = g->weight + (ob / g->PB) * g->PBS + ob % g->PB;
    const float* a = g->image + q0 * g->CS;
    for (int64_t q = 0; q < n; q += tile) {
      const int px = n - q < tile ? (int)(n - q) : tile;
      tiles[px](g, a + q * g->CS, wp, out + q * g->OC + ob, lanes - 8 * (vectors - 1));
    }
    return;
  }
  /* one chunk of input channels at a time over the whole span: the block's weight rows
     of one chunk (CB channels, 295 KiB for a 3x3) stay in L2 for every tile of the span,
     where a tile summing all the channels before the next began streamed a larger block
     (3x3 512->512: 590 KiB) from L3 once per tile. Each output adds the same products in
     the same order (chunk by chunk), its partial sum kept in ``out`` between chunks.
     Kernel alone, one Zen 3 core (AVX2), GFLOP/s: 3x3 512->512 at 7x7 83 -> 94, stride 2
     at 14x14 77 -> 83, at 14x14 86 -> 91; the others unchanged. */
  for (int64_t c0 = 0; c0 < g->C; c0 += CB) {
    rp_conv chunk = *g;
    chunk.c_begin = c0, chunk.c_end = g->C - c0 < CB ? g->C : c0 + CB;
    rp_conv_tiles(&chunk, level, ob, q0, n, out, lanes, vectors, tile);
  }
}

/* A call is cut into units of one channel block by about UNIT_PIXELS output pixels, in
   channel-block-major order: a thread's contiguous range of units reads few weight
   panels, each from the cache after its first unit. The units do not depend on the
   thread count, and every output sums its products in one order whatever unit computes
   it, so the result does not either. */
typedef struct {
  rp_conv g;
  float* out;
  int64_t first, count, block, pixel_units, unit_pixels, units_per_group, groups;
  int level;
} rp_conv_job;

#define UNIT_PIXELS RP_UNIT_PIXELS

static int rp_conv_units(void* ctx, int64_t begin, int64_t end) {
  const rp_conv_job* job = (const rp_conv_job*)ctx;
  for (int64_t u = begin; u < end; u++) {
    /* one group: channel-block-major (a thread's units read few weight panels); several:
       pixel-major, every group of a unit of pixels while its image rows are in cache */
    const int64_t blocks = job->units_per_group / job->pixel_units;
    int64_t group, ob, q;
    if (job->groups == 1) {
      group = 0, ob = (u / job->pixel_units) * job->block, q = (u % job->pixel_units) * job->unit_pixels;
    } else {
      const int64_t per_pixels = blocks * job->groups;
      q = (u / per_pixels) * job->unit_pixels, group = (u % per_pixels) / blocks;
      ob = (u % blocks) * job->block;
    }
    rp_conv g = job->g;
    /* a group's image channels, weight columns (in panels: its ON / PB panels) and output columns */
    g.image += group * g.C;
    g.weight += g.PBS ? group * (g.ON / g.PB) * g.PBS : group * g.ON;
    g.ch = group * g.ON;
    int64_t n = job->count - q < job->unit_pixels ? job->count - q : job->unit_pixels;
    rp_conv_span(&g, job->level, ob, job->first + q, n, job->out + q * g.OC + group * g.ON);
  }
  return 0;
}

typedef int (*rp_chunk_fn)(void* ctx, int64_t begin, int64_t end);
extern int rp_parallel_for(rp_chunk_fn fn, void* ctx, int64_t extent, int64_t work_per_iteration);

/* C and OC count every group's channels; each group reads C/groups input channels and
   writes OC/groups output channels */
static int rp_conv2d_run(const float* image, const float* weight, float* out, int64_t H, int64_t W,
    int64_t C, int64_t OC, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
    int64_t pt, int64_t pl, int64_t OW, int64_t first, int64_t count, int64_t groups, int64_t panel,
    const rp_conv_epi* epi) {
  int level = __atomic_load_n(&rp_conv_level, __ATOMIC_RELAXED);
  if (level < 0) level = raypass_conv_isa(-1);
  const int64_t cg = C / groups, og = OC / groups;
  /* at least UNIT_PIXELS pixels a unit (7x7 = 49 is one unit, not 48 and a lone pixel
     that reads a whole weight panel again), whole tiles but the last: of 8 pixels, of 6
     and 3 with AVX2 (units of 56 pixels left a 2-pixel tile in each: VGG-19's rows of 224
     pixels ran four, 5% of its time) */
  const int64_t whole = level == 1 ? 6 : 8;
  int64_t pixel_units = count / UNIT_PIXELS > 1 ? count / UNIT_PIXELS : 1;
  int64_t unit_pixels = ((count + pixel_units - 1) / pixel_units + whole - 1) / whole * whole;
  const int64_t block = level ? 32 : 8;
  pixel_units = (count + unit_pixels - 1) / unit_pixels;
  /* panels: every block of output channels reads one contiguous panel (grouped: a group's
     outputs are one panel, or whole panels) */
  const int64_t ldw = panel > 0 ? panel : OC, pbs = panel > 0 ? KH * KW * cg * panel : 0;
  rp_conv_job job = {{image, weight, H, W, cg, OC, KH, KW, sh, sw, dh, dw, pt, pl, OW, C, og, ldw, ldw, pbs, 0, cg, epi, 0},
                     out, first, count, block, pixel_units, unit_pixels,
                     (og + block - 1) / block * pixel_units, groups, level};
  int64_t units = groups * job.units_per_group;
  /* work per unit in the pool's units (about a nanosecond): RP_MACS_PER_WORK multiply-adds each */
  int64_t work = block * unit_pixels * KH * KW * cg / RP_MACS_PER_WORK;
  return rp_parallel_for(rp_conv_units, &job, units, work > 0 ? work : 1);
}

int rp_conv2d_f32(const float* image, const float* weight, float* out, int64_t H, int64_t W,
    int64_t C, int64_t OC, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
    int64_t pt, int64_t pl, int64_t OW, int64_t first, int64_t count, int64_t groups, int64_t panel) {
  return rp_conv2d_run(image, weight, out, H, W, C, OC, KH, KW, sh, sw, dh, dw, pt, pl, OW, first, count,
                       groups, panel, 0);
}

/* the same with the epilogue (rp_conv_epi): ``bias`` and ``residual`` are read only where
   ``flags`` says (RP_EPI_*), and ``residual`` from the element at ``out``'s */
int rp_conv2d_f32_epi(const float* image, const float* weight, float* out, int64_t H, int64_t W,
    int64_t C, int64_t OC, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
    int64_t pt, int64_t pl, int64_t OW, int64_t first, int64_t count, int64_t groups, int64_t panel,
    int64_t flags, float p0, float p1, const float* bias, const float* residual) {
  const rp_conv_epi epi = {out, flags & RP_EPI_BIAS ? bias : 0, flags & RP_EPI_RESIDUAL ? residual : 0,
                           (flags & RP_EPI_RESIDUAL_FIRST) != 0, (int)(flags & RP_EPI_ACT_MASK), p0, p1};
  return rp_conv2d_run(image, weight, out, H, W, C, OC, KH, KW, sh, sw, dh, dw, pt, pl, OW, first, count,
                       groups, panel, &epi);
}

/* ====================================================================== Winograd F(2x2, 3x3)
   A stride-1 3x3 convolution (one group, NHWC) of one image: per 2x2 block of outputs (a
   tile) the 4x4 input patch d is transformed to B^T d B (16 points per channel, adds
   only), the 16 points' GEMMs V[point] (tiles x C) x U[point] (C x OC) run on the
   pointwise tiles above, and A^T m A (adds only) gives the tile's outputs. U is the
   weight's transform G g G^T (passinfra.ir.op.winograd_weights: [ceil(OC/32)][16*C][32]
   panels, row point*C + c).

   The call is cut into units of whole tile rows (about RP_WINO_TILES tiles: a unit's
   patches and products stay in L2 while its 16 GEMMs read them) by parts of the output
   channels (whole panels; several only where the image has few tile rows, so that small
   images still split over the threads). A unit transforms its patches, runs its part's
   GEMMs and writes its outputs; its scratch is its thread's (grown on demand, freed when
   the thread exits). The units depend on the shape only, and every output is the same
   adds and the same GEMM sums whatever unit or thread computes it, on AVX2 and AVX-512
   alike (the transforms are adds, the GEMMs the pointwise tiles'). */
#include <pthread.h>

#ifndef RP_WINO_TILES
#define RP_WINO_TILES 24        /* tiles a unit has at least, where the image has them */
#endif
#ifndef RP_WINO_MIN_UNITS
#define RP_WINO_MIN_UNITS 8     /* fewer tile rows per unit, then parts of the outputs, below this many units */
#endif
#ifndef RP_WINO_SHARED_U
#define RP_WINO_SHARED_U (1 << 20)
#endif
#ifndef RP_WINO_MIN_PART
#define RP_WINO_MIN_PART 64     /* output channels a part keeps at least */
#endif

typedef float rp_v8 __attribute__((vector_size(32)));
typedef float rp_v16 __attribute__((vector_size(64)));

typedef struct {
  const float* image; float* out; float* V; float* M;
  int64_t H, W, C, OC, pt, pl, OW;
  int64_t m;                /* outputs a tile per side: F(2x2, 3x3) or F(4x4, 3x3) */
  int64_t first_row, rows;  /* the unit's output rows */
  int64_t o0, NO;           /* the unit's output channels */
  int64_t tiles_x, tiles;
} rp_wino;

/* The 1-D transforms, from I(k) into O(k) (accessor macros); the 2-D ones apply them to
   the columns, then to the rows. Written once for vectors and single lanes: the same
   operations in the same order, so both give the same bits. F(2x2, 3x3): B^T over the
   points 0, 1, -1 (adds only); F(4x4, 3x3): over 0, 1, -1, 2, -2 (Lavin and Gray's). */
#define RP_WINO_B2(I, O) { O(0) = I(0) - I(2); O(1) = I(1) + I(2); O(2) = I(2) - I(1); O(3) = I(1) - I(3); }
#define RP_WINO_A2(I, O) { O(0) = I(0) + I(1) + I(2); O(1) = I(1) - I(2) - I(3); }
#define RP_WINO_B4(I, O) { \
  O(0) = (4.0f * I(0) - 5.0f * I(2)) + I(4); \
  O(1) = (I(3) + I(4)) - 4.0f * (I(1) + I(2)); \
  O(2) = (I(4) - I(3)) + 4.0f * (I(1) - I(2)); \
  O(3) = (I(4) - I(2)) + 2.0f * (I(3) - I(1)); \
  O(4) = (I(4) - I(2)) - 2.0f * (I(3) - I(1)); \
  O(5) = (4.0f * I(1) - 5.0f * I(3)) + I(5); }
#define RP_WINO_A4(I, O) { \
  O(0) = I(0) + (I(1) + I(2)) + (I(3) + I(4)); \
  O(1) = (I(1) - I(2)) + 2.0f * (I(3) - I(4)); \
  O(2) = (I(1) + I(2)) + 4.0f * (I(3) + I(4)); \
  O(3) = ((I(1) - I(2)) + 8.0f * (I(3) - I(4))) + I(5); }

/* the data and result transforms of a unit for tiles of MT x MT outputs (ALPHA = MT + 2 input
   rows and columns a patch, P = ALPHA^2 points), 8 channels at a time then one */
/* a transform's loop over vectors of VW channels of type VT (AVX-512: 16, then 8 for
   a rest of 8 or more): the same operations a lane in every width, so the same bits */
#define RP_WINO_DATA_VECTORS(VT, VW, BMAC) \
    for (; c + (VW) <= C; c += (VW)) { \
      VT x[P], t[P], y[P]; \
      for (int k = 0; k < P; k++) { \
        if (src[k]) memcpy(&x[k], src[k] + c, sizeof x[k]); \
        else x[k] = (VT){0}; \
      } \
      RP_WINO_2D(BMAC) \
      for (int k = 0; k < P; k++) memcpy(dst + k * stride + c, &y[k], sizeof y[k]); \
    }
#define RP_WINO_RESULT_VECTORS(VT, VW, AMAC) \
    for (; o + (VW) <= NO; o += (VW)) { \
      VT x[P], t[K * N], y[K * K]; \
      for (int k = 0; k < P; k++) memcpy(&x[k], src + k * stride + o, sizeof x[k]); \
      RP_WINO_2D(AMAC) \
      for (int a = 0; a < rows; a++) \
        for (int b = 0; b < cols; b++) memcpy(dst + (a * w->OW + b) * w->OC + o, &y[a * K + b], sizeof y[0]); \
    }
#define RP_WINO_TRANSFORMS(S, TARGET, VT, VW, MT, ALPHA, BMAC, AMAC) \
TARGET static void rp_wino_data_##S##_##MT(const rp_wino* w) { \
  enum { P = ALPHA * ALPHA, N = ALPHA, K = ALPHA }; \
  const int64_t C = w->C, stride = w->tiles * C; \
  for (int64_t tile = 0; tile < w->tiles; tile++) { \
    const int64_t iy0 = w->first_row + MT * (tile / w->tiles_x) - w->pt, ix0 = MT * (tile % w->tiles_x) - w->pl; \
    const float* src[P]; \
    for (int i = 0; i < ALPHA; i++) \
      for (int j = 0; j < ALPHA; j++) { \
        const int64_t iy = iy0 + i, ix = ix0 + j; \
        src[i * ALPHA + j] = iy >= 0 && iy < w->H && ix >= 0 && ix < w->W ? w->image + (iy * w->W + ix) * C : 0; \
      } \
    float* dst = w->V + tile * C; \
    int64_t c = 0; \
    RP_WINO_DATA_VECTORS(VT, VW, BMAC) \
    RP_WINO_DATA_VECTORS(rp_v8, 8, BMAC) \
    for (; c < C; c++) { \
      float x[P], t[P], y[P]; \
      for (int k = 0; k < P; k++) x[k] = src[k] ? src[k][c] : 0.0f; \
      RP_WINO_2D(BMAC) \
      for (int k = 0; k < P; k++) dst[k * stride + c] = y[k]; \
    } \
  } \
} \
TARGET static void rp_wino_result_##S##_##MT(const rp_wino* w) { \
  enum { P = ALPHA * ALPHA, N = ALPHA, K = MT }; \
  const int64_t NO = w->NO, stride = w->tiles * NO; \
  for (int64_t tile = 0; tile < w->tiles; tile++) { \
    const int64_t oy = MT * (tile / w->tiles_x), ox = MT * (tile % w->tiles_x); \
    const int rows = w->rows - oy < MT ? (int)(w->rows - oy) : MT, cols = w->OW - ox < MT ? (int)(w->OW - ox) : MT; \
    const float* src = w->M + tile * NO; \
    float* dst = w->out + ((w->first_row + oy) * w->OW + ox) * w->OC + w->o0; \
    int64_t o = 0; \
    RP_WINO_RESULT_VECTORS(VT, VW, AMAC) \
    RP_WINO_RESULT_VECTORS(rp_v8, 8, AMAC) \
    for (; o < NO; o++) { \
      float x[P], t[MT * ALPHA], y[MT * MT]; \
      for (int k = 0; k < P; k++) x[k] = src[k * stride + o]; \
      RP_WINO_2D(AMAC) \
      for (int a = 0; a < rows; a++) \
        for (int b = 0; b < cols; b++) dst[(a * w->OW + b) * w->OC + o] = y[a * MT + b]; \
    } \
  } \
}
/* x (N x N, row-major) -> t (K x N: the 1-D transform down each column) -> y (K x K: along
   each row of t); x, t, y, N and K are the names in scope where it is used */
#define RP_WINO_2D(MAC) { \
  for (int j = 0; j < N; j++) MAC(RP_WINO_COLUMN_IN, RP_WINO_COLUMN_OUT) \
  for (int i = 0; i < K; i++) MAC(RP_WINO_ROW_IN, RP_WINO_ROW_OUT) }
#define RP_WINO_COLUMN_IN(k) x[(k) * N + j]
#define RP_WINO_COLUMN_OUT(k) t[(k) * N + j]
#define RP_WINO_ROW_IN(k) t[i * N + (k)]
#define RP_WINO_ROW_OUT(k) y[i * K + (k)]
RP_WINO_TRANSFORMS(avx512, __attribute__((target("avx512f"))), rp_v16, 16, 2, 4, RP_WINO_B2, RP_WINO_A2)
RP_WINO_TRANSFORMS(avx2, __attribute__((target("avx2,fma"))), rp_v8, 8, 2, 4, RP_WINO_B2, RP_WINO_A2)
RP_WINO_TRANSFORMS(c, , rp_v8, 8, 2, 4, RP_WINO_B2, RP_WINO_A2)
RP_WINO_TRANSFORMS(avx512, __attribute__((target("avx512f"))), rp_v16, 16, 4, 6, RP_WINO_B4, RP_WINO_A4)
RP_WINO_TRANSFORMS(avx2, __attribute__((target("avx2,fma"))), rp_v8, 8, 4, 6, RP_WINO_B4, RP_WINO_A4)
RP_WINO_TRANSFORMS(c, , rp_v8, 8, 4, 6, RP_WINO_B4, RP_WINO_A4)

/* A unit: its tiles' patches, its part's GEMMs (one per point), its outputs. */
static void rp_wino_unit(const rp_wino* w, const float* U, int level) {
  const int64_t points = (w->m + 2) * (w->m + 2);
  if (w->m == 4) {
    if (level == 2) rp_wino_data_avx512_4(w);
    else if (level) rp_wino_data_avx2_4(w);
    else rp_wino_data_c_4(w);
  } else if (level == 2) rp_wino_data_avx512_2(w);
  else if (level) rp_wino_data_avx2_2(w);
  else rp_wino_data_c_2(w);
  const int64_t block = level ? 32 : 8, C = w->C;
  for (int64_t point = 0; point < points; point++) {
    /* the point's GEMM as a pointwise convolution of a 1 x tiles image: the transformed
       patches' C channels into the part's NO, the weight's point rows in panels of 32 */
    const rp_conv g = {w->V + point * w->tiles * C, U + (w->o0 / 32) * points * C * 32 + point * C * 32, 1,
                       w->tiles, C, w->NO, 1, 1, 1, 1, 1, 1, 0, 0, w->tiles, C, w->NO, 32, 32, points * C * 32, 0, C, 0, 0};
    for (int64_t ob = 0; ob < w->NO; ob += block) rp_conv_span(&g, level, ob, 0, w->tiles, w->M + point * w->tiles * w->NO);
  }
  if (w->m == 4) {
    if (level == 2) rp_wino_result_avx512_4(w);
    else if (level) rp_wino_result_avx2_4(w);
    else rp_wino_result_c_4(w);
  } else if (level == 2) rp_wino_result_avx512_2(w);
  else if (level) rp_wino_result_avx2_2(w);
  else rp_wino_result_c_2(w);
}

/* a thread's scratch: one allocation, grown on demand, freed when the thread exits (the
   libraries holding this runtime are never unloaded, so the destructor stays mapped) */
typedef struct { float* data; size_t floats; } rp_wino_scratch;
static pthread_key_t rp_wino_key;
static pthread_once_t rp_wino_key_once = PTHREAD_ONCE_INIT;
static int rp_wino_key_ok;
static void rp_wino_scratch_free(void* p) {
  rp_wino_scratch* s = (rp_wino_scratch*)p;
  free(s->data);
  free(s);
}
static void rp_wino_key_create(void) { rp_wino_key_ok = pthread_key_create(&rp_wino_key, rp_wino_scratch_free) == 0; }
static float* rp_wino_scratch_for(size_t floats) {
  pthread_once(&rp_wino_key_once, rp_wino_key_create);
  if (!rp_wino_key_ok) return 0;
  rp_wino_scratch* s = (rp_wino_scratch*)pthread_getspecific(rp_wino_key);
  if (!s) {
    s = (rp_wino_scratch*)calloc(1, sizeof *s);
    if (!s || pthread_setspecific(rp_wino_key, s) != 0) { free(s); return 0; }
  }
  if (s->floats < floats) {
    free(s->data);
    s->data = (float*)malloc(floats * sizeof(float));
    s->floats = s->data ? floats : 0;
  }
  return s->data;
}

typedef struct {
  rp_wino w;
  const float* U;
  int64_t OH, tile_rows, parts, part;
  int level;
} rp_wino_job;

static int rp_wino_units(void* ctx, int64_t begin, int64_t end) {
  const rp_wino_job* job = (const rp_wino_job*)ctx;
  const int64_t m = job->w.m, points = (m + 2) * (m + 2);
  for (int64_t u = begin; u < end; u++) {
    rp_wino w = job->w;
    w.first_row = (u / job->parts) * m * job->tile_rows;
    w.rows = job->OH - w.first_row < m * job->tile_rows ? job->OH - w.first_row : m * job->tile_rows;
    w.o0 = (u % job->parts) * job->part;
    w.NO = w.OC - w.o0 < job->part ? w.OC - w.o0 : job->part;
    w.tiles = (w.rows + m - 1) / m * w.tiles_x;
    float* scratch = rp_wino_scratch_for((size_t)(points * w.tiles * (w.C + w.NO)));
    if (!scratch) return -1;
    w.V = scratch, w.M = scratch + points * w.tiles * w.C;
    rp_wino_unit(&w, job->U, job->level);
  }
  return 0;
}

int rp_winograd_f32(const float* image, const float* U, float* out, int64_t H, int64_t W, int64_t C,
    int64_t OC, int64_t pt, int64_t pl, int64_t OH, int64_t OW, int64_t m) {
  int level = __atomic_load_n(&rp_conv_level, __ATOMIC_RELAXED);
  if (level < 0) level = raypass_conv_isa(-1);
  const int64_t points = (m + 2) * (m + 2);
  const int64_t tiles_x = (OW + m - 1) / m, tiles_y = (OH + m - 1) / m;
  int64_t tile_rows = (RP_WINO_TILES + tiles_x - 1) / tiles_x < tiles_y ? (RP_WINO_TILES + tiles_x - 1) / tiles_x
                                                                           : tiles_y;
  /* a transform larger than RP_WINO_SHARED_U bytes is read once per unit from L3 or memory:
     fewer, larger units of tile rows then, and parts of the outputs for the threads */
  const int large = points * C * OC * (int64_t)sizeof(float) > RP_WINO_SHARED_U;
  if (large) tile_rows = tiles_y;
  while (!large && tile_rows > 1 && (tiles_y + tile_rows - 1) / tile_rows < RP_WINO_MIN_UNITS)
    tile_rows = (tile_rows + 1) / 2;
  const int64_t blocks = (tiles_y + tile_rows - 1) / tile_rows;
  /* parts of whole panels, at least RP_WINO_MIN_PART channels, until there are enough units */
  int64_t parts = 1;
  while (blocks * parts < RP_WINO_MIN_UNITS && (OC + 2 * parts - 1) / (2 * parts) >= RP_WINO_MIN_PART) parts *= 2;
  const int64_t part = ((OC + parts - 1) / parts + 31) / 32 * 32;
  parts = (OC + part - 1) / part;
  rp_wino_job job = {{image, out, 0, 0, H, W, C, OC, pt, pl, OW, m, 0, 0, 0, 0, tiles_x, 0}, U, OH, tile_rows, parts,
                     part, level};
  int64_t work = tile_rows * tiles_x * points * C * part / RP_MACS_PER_WORK;
  return rp_parallel_for(rp_wino_units, &job, blocks * parts, work > 0 ? work : 1);
}

/* ====================================================================== depthwise
   One input channel per output channel (weight [KH][KW][1][C]): lanes are channels and
   a pixel sums KH*KW products per channel. A tile is four adjacent output pixels of a
   row and one vector of channels; for the common kernel widths and strides (3, 5, 7;
   stride 1 or 2) the tile's window of a tap row is loaded into registers once and every
   tap reads it there (an input vector serves up to KW products, which is what makes a
   depthwise convolution run at 30-84 GFLOP/s instead of 18-38); a row's last tile ends
   at the row's end, overlapping the one before. Rows narrower than a tile, and other
   widths, take one pixel at a time (AVX2 runs eight pixels of a row inside the image's
   columns as one tile: RP_DW_ROW8). A tap outside the image's
   columns multiplies a zero in both, and a tap row outside is skipped in both, so a
   pixel's sum has the same operations in the same order whichever computes it. */
typedef struct {
  const float* image; const float* weight;
  int64_t H, W, C, KH, KW, sh, sw, dh, dw, pt, pl, OW;
  const rp_conv_epi* epi;  /* the call's epilogue, applied as the tiles store; or NULL */
} rp_dw;

/* Every depthwise tile is compiled twice: as it was (EPI 0), and applying the epilogue to
   its sums in registers before its stores (EPI 1, names ending in e), for calls that carry
   one. One function for both cost the tiles 5-6% where no epilogue was applied (ShuffleNet's
   3x3 layers: other registers for their loops); applying it after the stores, per tile,
   1.57x. The tiles' sums are acc[p][0] (pixel p at out + p*C, the lanes' channels from c). */
#define RP_DW_EPI_BIAS256(v) RP_LOAD_256(e_->bias + ch_)
#define RP_DW_EPI_RES256(p, v) RP_LOAD_256(e_->residual + off_ + (p) * g->C)
#define RP_DW_EPI_BIAS512(v) RP_LOAD_512(e_->bias + ch_)
#define RP_DW_EPI_RES512(p, v) RP_LOAD_512(e_->residual + off_ + (p) * g->C)
#define RP_EPI_ADD256 _mm256_add_ps
#define RP_EPI_MUL256 _mm256_mul_ps
#define RP_EPI_SET1256 _mm256_set1_ps
#define RP_EPI_ADD512 _mm512_add_ps
#define RP_EPI_MUL512 _mm512_mul_ps
#define RP_EPI_SET1512 _mm512_set1_ps
#define RP_DW_EPI(EPI, PX, VEC, ISA) \
  if (EPI) { \
    RP_EPI_APPLY(1, c, PX, 1, VEC, RP_EPI_ADD##ISA, RP_EPI_MUL##ISA, rp_epi_max##ISA, rp_epi_min##ISA, \
                 RP_EPI_SET1##ISA, RP_DW_EPI_BIAS##ISA, RP_DW_EPI_RES##ISA) \
  }

#define RP_DW_PIXEL(ISA_, EPI, NAME, TARGET, VEC, LANES, MASK_T, LOAD, ZERO, FMA, STORE) \
TARGET static void NAME(const rp_dw* g, int64_t oy, int64_t ox, int64_t c, MASK_T m, float* out) { \
  RP_FULL_##ISA_; \
  VEC acc[1][1] = {{ZERO}}; \
  for (int64_t ry = 0; ry < g->KH; ry++) { \
    int64_t iy = oy * g->sh + ry * g->dh - g->pt; \
    if (iy < 0 || iy >= g->H) continue; \
    for (int64_t rx = 0; rx < g->KW; rx++) { \
      int64_t ix = ox * g->sw + rx * g->dw - g->pl; \
      VEC x = (ix >= 0 && ix < g->W) ? LOAD(g->image + (iy * g->W + ix) * g->C + c) : ZERO; \
      acc[0][0] = FMA(x, LOAD(g->weight + (ry * g->KW + rx) * g->C + c), acc[0][0]); \
    } \
  } \
  RP_DW_EPI(EPI, 1, VEC, ISA_) \
  STORE(out, acc[0][0]); \
}

/* A tile's sums of every tap row, its inputs read with LD: whole vectors (plain loads)
   or the channel tail (masked ones); a window inside the image's columns loads without
   checking each column. vmaskmovps on whole vectors and a check per input had cost AVX2
   10-25%: one Zen 3 core, GFLOP/s, 3x3 stride 2 72 channels at 56x56 19 -> 24, 3x3 32 at
   112x112 29 -> 35, 5x5 240 at 14x14 33 -> 38, 7x7 96 at 56x56 43 -> 46 (the same sums) */
#define RP_DW_ROW4_SUM(LD, VEC, ZERO, FMA, K, S) \
  for (int64_t ry = 0; ry < g->KH; ry++) { \
    int64_t iy = oy * g->sh + ry * g->dh - g->pt; \
    if (iy < 0 || iy >= g->H) continue; \
    const float* row = g->image + iy * g->W * g->C + c; \
    const float* wr = g->weight + ry * g->KW * g->C + c; \
    VEC x[XW]; \
    if (inside) { \
      _Pragma("GCC unroll 32") for (int i = 0; i < XW; i++) x[i] = LD(row + (ix0 + i) * g->C); \
    } else { \
      _Pragma("GCC unroll 32") for (int i = 0; i < XW; i++) \
        x[i] = (ix0 + i >= 0 && ix0 + i < g->W) ? LD(row + (ix0 + i) * g->C) : ZERO; \
    } \
    _Pragma("GCC unroll 8") for (int rx = 0; rx < K; rx++) { \
      VEC w = LD(wr + rx * g->C); \
      acc[0][0] = FMA(x[rx], w, acc[0][0]); \
      acc[1][0] = FMA(x[S + rx], w, acc[1][0]); \
      acc[2][0] = FMA(x[2 * S + rx], w, acc[2][0]); \
      acc[3][0] = FMA(x[3 * S + rx], w, acc[3][0]); \
    } \
  }

#define RP_DW_ROW4(ISA_, EPI, NAME, K, S, TARGET, VEC, MASK_T, LOAD, ZERO, FMA, STORE) \
TARGET static void NAME##_##K##_##S(const rp_dw* g, int64_t oy, int64_t ox, int64_t c, MASK_T m, \
                                    float* out) { \
  RP_FULL_##ISA_; \
  enum { XW = 3 * S + K }; \
  VEC acc[4][1] = {{ZERO}, {ZERO}, {ZERO}, {ZERO}}; \
  const int64_t ix0 = ox * S - g->pl; \
  const int inside = ix0 >= 0 && ix0 + XW <= g->W; \
  if (RP_WHOLE_##ISA_) { RP_DW_ROW4_SUM(RP_LOADU_##ISA_, VEC, ZERO, FMA, K, S) } \
  else { RP_DW_ROW4_SUM(LOAD, VEC, ZERO, FMA, K, S) } \
  RP_DW_EPI(EPI, 4, VEC, ISA_) \
  STORE(out, acc[0][0]); STORE(out + g->C, acc[1][0]); STORE(out + 2 * g->C, acc[2][0]); \
  STORE(out + 3 * g->C, acc[3][0]); \
}

#define RP_DW_ISA(ISA, V, EPI, TARGET, VEC, LANES, MASK_T, LOAD, ZERO, FMA, STORE) \
RP_DW_PIXEL(ISA, EPI, rp_dw_pixel_##ISA##V, TARGET, VEC, LANES, MASK_T, LOAD, ZERO, FMA, STORE) \
RP_DW_ROW4(ISA, EPI, rp_dw_row4_##ISA##V, 3, 1, TARGET, VEC, MASK_T, LOAD, ZERO, FMA, STORE) \
RP_DW_ROW4(ISA, EPI, rp_dw_row4_##ISA##V, 3, 2, TARGET, VEC, MASK_T, LOAD, ZERO, FMA, STORE) \
RP_DW_ROW4(ISA, EPI, rp_dw_row4_##ISA##V, 5, 1, TARGET, VEC, MASK_T, LOAD, ZERO, FMA, STORE) \
RP_DW_ROW4(ISA, EPI, rp_dw_row4_##ISA##V, 5, 2, TARGET, VEC, MASK_T, LOAD, ZERO, FMA, STORE) \
RP_DW_ROW4(ISA, EPI, rp_dw_row4_##ISA##V, 7, 1, TARGET, VEC, MASK_T, LOAD, ZERO, FMA, STORE) \
typedef void (*rp_dw_fn_##ISA##V)(const rp_dw*, int64_t, int64_t, int64_t, MASK_T, float*); \
static rp_dw_fn_##ISA##V rp_dw_row4_for_##ISA##V(const rp_dw* g) { \
  if (g->dw != 1) return 0; \
  if (g->KW == 3) return g->sw == 1 ? rp_dw_row4_##ISA##V##_3_1 : g->sw == 2 ? rp_dw_row4_##ISA##V##_3_2 : 0; \
  if (g->KW == 5) return g->sw == 1 ? rp_dw_row4_##ISA##V##_5_1 : g->sw == 2 ? rp_dw_row4_##ISA##V##_5_2 : 0; \
  if (g->KW == 7) return g->sw == 1 ? rp_dw_row4_##ISA##V##_7_1 : 0; \
  return 0; \
} \
TARGET static void rp_dw_rows_##ISA##V(const rp_dw* g, int64_t oy, float* out) { \
  rp_dw_fn_##ISA##V row4 = rp_dw_row4_for_##ISA##V(g); \
  int64_t ox = 0; \
  if (row4 && g->OW >= 4) { \
    /* the last tile ends at the row's end, computing again pixels the previous tile \
       wrote (the same bits: one order per pixel): a 7- or 14-pixel row runs no pixel \
       on the single-pixel path, which is half as fast */ \
    for (; ox < g->OW; ox += 4) { \
      if (ox + 4 > g->OW) ox = g->OW - 4; \
      if (RP_DW_ROW8_##ISA(V, g, oy, ox, out)) { ox += 4; continue; } /* eight pixels done */ \
      for (int64_t c = 0; c < g->C; c += LANES) \
        row4(g, oy, ox, c, RP_MASK_##ISA(g->C - c), out + ox * g->C + c); \
    } \
  } \
  for (; ox < g->OW; ox++) \
    for (int64_t c = 0; c < g->C; c += LANES) \
      rp_dw_pixel_##ISA##V(g, oy, ox, c, RP_MASK_##ISA(g->C - c), out + ox * g->C + c); \
}

#define RP_DW_ROW8_512(V, g, oy, ox, out) 0  /* 4 pixels of 16 lanes already keep the FMA units busy */
#define RP_MASK_512(n) ((n) >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n)) - 1u))
#define RP_FULL_512 (void)0
#define RP_WHOLE_512 0  /* one body: AVX-512's masked loads cost nothing */
#define RP_LOADU_512(p) RP_LOAD_512(p)
#define RP_LOAD_512(p) _mm512_maskz_loadu_ps(m, (p))
#define RP_STORE_512(p, v) _mm512_mask_storeu_ps((p), m, (v))
RP_DW_ISA(512, , 0, __attribute__((target("avx512f"))), __m512, 16, __mmask16, RP_LOAD_512, _mm512_setzero_ps(),
          _mm512_fmadd_ps, RP_STORE_512)
RP_DW_ISA(512, e, 1, __attribute__((target("avx512f"))), __m512, 16, __mmask16, RP_LOAD_512, _mm512_setzero_ps(),
          _mm512_fmadd_ps, RP_STORE_512)

#define RP_MASK_256(n) _mm256_cmpgt_epi32(_mm256_set1_epi32((n) >= 8 ? 8 : (int)(n)), \
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
/* vmaskmovps is slow on some CPUs: whole vectors load and store plainly */
#define RP_FULL_256 const int full = _mm256_movemask_ps(_mm256_castsi256_ps(m)) == 0xFF
#define RP_WHOLE_256 full
#define RP_LOADU_256(p) _mm256_loadu_ps(p)
#define RP_LOAD_256(p) (full ? _mm256_loadu_ps(p) : _mm256_maskload_ps((p), m))
#define RP_STORE_256(p, v) (full ? _mm256_storeu_ps((p), (v)) : _mm256_maskstore_ps((p), m, (v)))

/* AVX2: tiles of eight pixels of a row inside the image's columns. A four-pixel tile's
   four sums are four chains of dependent fused multiply-adds, which keep the FMA units
   half busy (a chain waits for the multiply-add before it on Zen 3 and Intel cores);
   eight pixels are eight chains. Their inputs are read from memory (the cache) per tap,
   not kept as a window in registers: eight accumulators and a weight leave too few. The
   same products in the same order per pixel as the four-pixel tiles. One Zen 3 core,
   kernel alone (C harness, best of 7 interleaved rounds), GFLOP/s, 4 -> 8 pixels: 3x3 at
   112x112x32 35 -> 48, at 56x56x144 31 -> 40, stride 2 at 112x112x16 21 -> 28; 5x5 at
   14x14x240 38 -> 43, at 28x28x240 42 -> 49; 7x7 at 56x56x96 46 -> 63 (the same bits). */
#define RP_DW_ROW8_SUM(LD, K, S) \
  for (int64_t ry = 0; ry < g->KH; ry++) { \
    const int64_t iy = oy * g->sh + ry * g->dh - g->pt; \
    if (iy < 0 || iy >= g->H) continue; \
    const float* row = g->image + (iy * g->W + ix0) * g->C + c; \
    const float* wr = g->weight + ry * g->KW * g->C + c; \
    _Pragma("GCC unroll 8") for (int rx = 0; rx < K; rx++) { \
      const __m256 w = LD(wr + rx * g->C); \
      _Pragma("GCC unroll 8") for (int p = 0; p < 8; p++) \
        acc[p][0] = _mm256_fmadd_ps(LD(row + (p * S + rx) * g->C), w, acc[p][0]); \
    } \
  }
#define RP_DW_ROW8(V, EPI, K, S) \
__attribute__((target("avx2,fma"))) static void rp_dw_row8_256##V##_##K##_##S( \
    const rp_dw* g, int64_t oy, int64_t ox, int64_t c, __m256i m, float* out) { \
  RP_FULL_256; \
  __m256 acc[8][1]; \
  _Pragma("GCC unroll 8") for (int p = 0; p < 8; p++) acc[p][0] = _mm256_setzero_ps(); \
  const int64_t ix0 = ox * S - g->pl; \
  if (full) { RP_DW_ROW8_SUM(_mm256_loadu_ps, K, S) } \
  else { RP_DW_ROW8_SUM(RP_LOAD_256, K, S) } \
  RP_DW_EPI(EPI, 8, __m256, 256) \
  _Pragma("GCC unroll 8") for (int p = 0; p < 8; p++) RP_STORE_256(out + p * g->C, acc[p][0]); \
}
#define RP_DW_ROW8S(V, EPI) \
  RP_DW_ROW8(V, EPI, 3, 1) RP_DW_ROW8(V, EPI, 3, 2) RP_DW_ROW8(V, EPI, 5, 1) RP_DW_ROW8(V, EPI, 5, 2) \
  RP_DW_ROW8(V, EPI, 7, 1)
RP_DW_ROW8S(, 0)
RP_DW_ROW8S(e, 1)

/* pixels ox .. ox+8 of output row oy on an eight-pixel tile, every channel: whether they
   were (one output row, taps inside the image's columns, a kernel width and stride the
   tiles have) */
#define RP_DW_ROW8_SELECT(V) \
__attribute__((target("avx2,fma"))) static int rp_dw_row8_256##V(const rp_dw* g, int64_t oy, int64_t ox, \
                                                                  float* out) { \
  typedef void (*row8_fn)(const rp_dw*, int64_t, int64_t, int64_t, __m256i, float*); \
  const int64_t ix0 = ox * g->sw - g->pl; \
  if (g->dw != 1 || ox + 8 > g->OW || ix0 < 0 || ix0 + 7 * g->sw + g->KW > g->W) return 0; \
  row8_fn fn = 0; \
  if (g->KW == 3) fn = g->sw == 1 ? rp_dw_row8_256##V##_3_1 : g->sw == 2 ? rp_dw_row8_256##V##_3_2 : 0; \
  else if (g->KW == 5) fn = g->sw == 1 ? rp_dw_row8_256##V##_5_1 : g->sw == 2 ? rp_dw_row8_256##V##_5_2 : 0; \
  else if (g->KW == 7) fn = g->sw == 1 ? rp_dw_row8_256##V##_7_1 : 0; \
  if (!fn) return 0; \
  for (int64_t c = 0; c < g->C; c += 8) fn(g, oy, ox, c, RP_MASK_256(g->C - c), out + ox * g->C + c); \
  return 1; \
}
RP_DW_ROW8_SELECT()
RP_DW_ROW8_SELECT(e)
#define RP_DW_ROW8_256(V, g, oy, ox, out) rp_dw_row8_256##V((g), (oy), (ox), (out))

RP_DW_ISA(256, , 0, __attribute__((target("avx2,fma"))), __m256, 8, __m256i, RP_LOAD_256, _mm256_setzero_ps(),
          _mm256_fmadd_ps, RP_STORE_256)
RP_DW_ISA(256, e, 1, __attribute__((target("avx2,fma"))), __m256, 8, __m256i, RP_LOAD_256, _mm256_setzero_ps(),
          _mm256_fmadd_ps, RP_STORE_256)

/* portable: one pixel and up to 64 channels at a time, the same order (no fused multiply-add) */
static void rp_dw_rows_c(const rp_dw* g, int64_t oy, float* out) {
  for (int64_t ox = 0; ox < g->OW; ox++)
    for (int64_t c0 = 0; c0 < g->C; c0 += 64) {
      const int64_t n = g->C - c0 < 64 ? g->C - c0 : 64;
      float acc[64] = {0};
      for (int64_t ry = 0; ry < g->KH; ry++) {
        int64_t iy = oy * g->sh + ry * g->dh - g->pt;
        if (iy < 0 || iy >= g->H) continue;
        for (int64_t rx = 0; rx < g->KW; rx++) {
          int64_t ix = ox * g->sw + rx * g->dw - g->pl;
          const float* w = g->weight + (ry * g->KW + rx) * g->C + c0;
          if (ix >= 0 && ix < g->W) {
            const float* x = g->image + (iy * g->W + ix) * g->C + c0;
            for (int64_t c = 0; c < n; c++) acc[c] += x[c] * w[c];
          } else {
            for (int64_t c = 0; c < n; c++) acc[c] += 0.0f * w[c];
          }
        }
      }
      if (g->epi)
        for (int64_t c = 0; c < n; c++)
          acc[c] = rp_epi1(g->epi, acc[c], out + ox * g->C + c0 + c - g->epi->out0, c0 + c);
      for (int64_t c = 0; c < n; c++) out[ox * g->C + c0 + c] = acc[c];
    }
}

typedef struct { rp_dw g; float* out; int64_t first_row; int level; } rp_dw_job;

static int rp_dw_rows(void* ctx, int64_t begin, int64_t end) {
  const rp_dw_job* job = (const rp_dw_job*)ctx;
  for (int64_t r = begin; r < end; r++) {
    float* out = job->out + r * job->g.OW * job->g.C;
    const int epi = job->g.epi != 0;
    if (job->level == 2) (epi ? rp_dw_rows_512e : rp_dw_rows_512)(&job->g, job->first_row + r, out);
    else if (job->level == 1) (epi ? rp_dw_rows_256e : rp_dw_rows_256)(&job->g, job->first_row + r, out);
    else rp_dw_rows_c(&job->g, job->first_row + r, out);
  }
  return 0;
}

/* output rows first/OW .. (first+count)/OW (whole rows), every channel */
static int rp_dwconv2d_run(const float* image, const float* weight, float* out, int64_t H, int64_t W,
    int64_t C, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
    int64_t pt, int64_t pl, int64_t OW, int64_t first, int64_t count, const rp_conv_epi* epi) {
  int level = __atomic_load_n(&rp_conv_level, __ATOMIC_RELAXED);
  if (level < 0) level = raypass_conv_isa(-1);
  rp_dw_job job = {{image, weight, H, W, C, KH, KW, sh, sw, dh, dw, pt, pl, OW, epi}, out, first / OW, level};
  int64_t work = OW * C * KH * KW / 8;  /* a vectorized multiply-add is ~1/8 of a work unit */
  return rp_parallel_for(rp_dw_rows, &job, count / OW, work > 0 ? work : 1);
}

int rp_dwconv2d_f32(const float* image, const float* weight, float* out, int64_t H, int64_t W,
    int64_t C, int64_t OC, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
    int64_t pt, int64_t pl, int64_t OW, int64_t first, int64_t count, int64_t groups, int64_t panel) {
  (void)OC; (void)groups; (void)panel;
  return rp_dwconv2d_run(image, weight, out, H, W, C, KH, KW, sh, sw, dh, dw, pt, pl, OW, first, count, 0);
}

/* the same with the epilogue (as rp_conv2d_f32_epi) */
int rp_dwconv2d_f32_epi(const float* image, const float* weight, float* out, int64_t H, int64_t W,
    int64_t C, int64_t OC, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
    int64_t pt, int64_t pl, int64_t OW, int64_t first, int64_t count, int64_t groups, int64_t panel,
    int64_t flags, float p0, float p1, const float* bias, const float* residual) {
  (void)OC; (void)groups; (void)panel;
  const rp_conv_epi epi = {out, flags & RP_EPI_BIAS ? bias : 0, flags & RP_EPI_RESIDUAL ? residual : 0,
                           (flags & RP_EPI_RESIDUAL_FIRST) != 0, (int)(flags & RP_EPI_ACT_MASK), p0, p1};
  return rp_dwconv2d_run(image, weight, out, H, W, C, KH, KW, sh, sw, dh, dw, pt, pl, OW, first, count, &epi);
}
