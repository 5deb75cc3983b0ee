/*
 * libattn — self-attention layers in C: forward, reference semantics,
 * PyTorch-compatible randomness and safetensors I/O.
 *
 * This is the one public header. Everything not declared here is internal.
 *
 * Shape legend (used in every comment of the library):
 *   B   batch size
 *   H   number of heads
 *   Sq  query sequence length        S  when Sq == Sk (self-attention)
 *   Sk  key/value sequence length
 *   D   head size of queries and keys
 *   Dv  head size of values (== D for every seed layer)
 *   C   model width (d_in); d_out is the projected width
 *
 * Conventions:
 *   - Tensors are float32, row-major (C order). Views passed to the core SDPA
 *     carry explicit strides in elements; the last dimension is contiguous.
 *   - Every fallible function returns an attn_status; ATTN_OK (0) is success.
 *     The library never prints, aborts or exits.
 *   - Boolean masks are uint8_t arrays (0 / non-zero). Their polarity is
 *     always named explicitly: see attn_mask_polarity.
 *   - Functions that free accept NULL.
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_VERSION_MAJOR 0
#define ATTN_VERSION_MINOR 3
#define ATTN_VERSION_PATCH 0
#define ATTN_VERSION_STRING "0.3.0"
#define ATTN_VERSION_NUMBER (ATTN_VERSION_MAJOR * 10000 + ATTN_VERSION_MINOR * 100 + ATTN_VERSION_PATCH)

#if defined(_WIN32)
#define ATTN_API
#elif defined(__GNUC__)
#define ATTN_API __attribute__((visibility("default")))
#else
#define ATTN_API
#endif

/* Versions and the ABI (docs/API.md): PATCH releases change no public
 * declaration; while MAJOR is 0 every MINOR release may change the layout
 * of a public struct (attn_sdpa_desc gains fields) and so has its own
 * soname, libattn.so.0.MINOR; from 1.0 on such a change bumps MAJOR
 * (libattn.so.MAJOR) and MINOR only adds functions, enum values and
 * structs. A program built against an older header is kept from an
 * incompatible shared library by the soname; attn_abi_compatible (at the
 * end of this header) also catches a library loaded by path. */
/* Library version string, "MAJOR.MINOR.PATCH". */
ATTN_API const char *attn_version(void);
/* The library's ATTN_VERSION_NUMBER (MAJOR * 10000 + MINOR * 100 + PATCH). */
ATTN_API int attn_version_number(void);
/* sizeof a public struct by its name ("attn_sdpa_desc", ...), 0 if unknown:
 * for bindings that mirror the structs (e.g. Python's ctypes) to check their
 * layout against the library they loaded. */
ATTN_API size_t attn_abi_size(const char *type_name);

/* ------------------------------------------------------------------------ */
/* Status codes. Values are pinned: they never change between versions.      */
/* ------------------------------------------------------------------------ */
typedef enum attn_status {
    ATTN_OK = 0,
    ATTN_E_INVALID = 1,      /* invalid argument (NULL pointer, bad enum, bad probability) */
    ATTN_E_SHAPE = 2,        /* inconsistent or unsupported shapes */
    ATTN_E_NOMEM = 3,        /* allocation failed */
    ATTN_E_OVERFLOW = 4,     /* a size computation would overflow */
    ATTN_E_IO = 5,           /* reading or writing a file failed */
    ATTN_E_FORMAT = 6,       /* malformed file (safetensors header, offsets, ...) */
    ATTN_E_NOT_FOUND = 7,    /* a named tensor is missing */
    ATTN_E_DTYPE = 8,        /* unsupported or unexpected dtype */
    ATTN_E_CONTEXT = 9,      /* sequence longer than the layer's context length */
    ATTN_E_UNSUPPORTED = 10, /* valid request this build or path cannot serve */
    ATTN_E_BUFFER = 11,      /* a persistent buffer (mask/tril) has unexpected contents */
    ATTN_E_STATE = 12,       /* call out of order (e.g. backward before forward) */
    ATTN_E_COMM = 13         /* a message-passing call failed (libattn_mpi) */
} attn_status;

/* A short static English description of a status; never NULL. */
ATTN_API const char *attn_status_string(attn_status s);

/* What the calling thread's most recent refusal was about, in one line that
 * names the argument, its value and what was expected ("kv_indices[0] = 99
 * is not a page of k_pages (16 pages)"), or "" when the call that failed
 * gave none. Set by the call that returns the status; the SDPA, block, KV
 * cache, pages, merge, layer, optimizer and safetensors entry points clear it
 * when they start, so after a refusal it is that call's and after a success it is "";
 * other calls leave it as it was. Per thread; never NULL. */
ATTN_API const char *attn_last_error(void);

/* ------------------------------------------------------------------------ */
/* PyTorch-compatible randomness                                             */
/* ------------------------------------------------------------------------ */

/* Which PyTorch CPU build the dropout stream imitates. torch.rand, uniform_
 * and the nn.Linear init are the same in every build; dropout is not:
 *  - ATTN_TORCH_MKL:   x86 builds with MKL (pip/conda wheels; the seeds). One
 *                      next32() per dropout call seeds an MCG31 stream.
 *  - ATTN_TORCH_NOMKL: builds without MKL (e.g. Debian's python3-torch).
 *                      Each element consumes one 64-bit draw (two next32()). */
typedef enum attn_torch_flavor { ATTN_TORCH_MKL = 0, ATTN_TORCH_NOMKL = 1 } attn_torch_flavor;

/* The state of torch's default CPU generator (MT19937). Plain struct: it can
 * live on the stack; copy it to fork a stream. */
typedef struct attn_generator {
    uint32_t mt[624];
    uint32_t index;
    uint32_t flavor; /* attn_torch_flavor */
} attn_generator;

/* torch.manual_seed(seed): MT19937 seeded with the low 32 bits. Flavor MKL. */
ATTN_API void attn_generator_seed(attn_generator *g, uint64_t seed);
ATTN_API void attn_generator_set_flavor(attn_generator *g, attn_torch_flavor f);
/* One raw 32-bit draw (torch's random()). */
ATTN_API uint32_t attn_generator_next32(attn_generator *g);
/* torch.rand(n): n floats in [0, 1), row-major. */
ATTN_API attn_status attn_rand(attn_generator *g, float *out, size_t n);
/* tensor.uniform_(a, b) on float32. */
ATTN_API attn_status attn_uniform(attn_generator *g, float *out, size_t n, double a, double b);
/* nn.Linear(in_features, out_features) init: weight (out, in) by
 * kaiming_uniform_(a=sqrt(5)), then bias (out) if bias != NULL. */
ATTN_API attn_status attn_linear_init(attn_generator *g, float *weight, float *bias, int64_t in_features,
                                      int64_t out_features);

/* One nn.Dropout(p) call over a tensor of n elements. Created by
 * attn_dropout_begin, which draws from the generator exactly what PyTorch's
 * dropout draws; p == 0 draws nothing. */
typedef struct attn_dropout {
    double p;          /* drop probability in [0, 1] (double, as torch passes it) */
    float scale;       /* kept values are multiplied by this: 1.0f / (float)(1 - p) */
    uint32_t flavor;   /* attn_torch_flavor */
    uint32_t mcg_seed; /* MKL: x0 of the MCG31 stream */
    uint8_t *keep;     /* NOMKL: materialized keep mask of n bytes (owned) */
    uint64_t n;        /* number of elements of the dropped tensor */
} attn_dropout;

ATTN_API attn_status attn_dropout_begin(attn_generator *g, double p, uint64_t n, attn_dropout *out);
/* Keep decision for flat element index i (row-major over the dropped tensor). */
ATTN_API int attn_dropout_keep(const attn_dropout *d, uint64_t i);
/* out[i] = in[i] * (keep(i) ? scale : 0) for i < d->n, as torch multiplies by
 * its noise tensor (so NaN inputs stay NaN). in may equal out. */
ATTN_API attn_status attn_dropout_apply(const attn_dropout *d, const float *in, float *out);
ATTN_API void attn_dropout_end(attn_dropout *d);
/* Convenience: nn.Dropout(p) in train mode on n elements (begin/apply/end). */
ATTN_API attn_status attn_dropout_tensor(attn_generator *g, double p, const float *in, float *out, size_t n);

/* Element types of tensors in files and of a few descriptor fields. */
typedef enum attn_dtype {
    ATTN_DTYPE_INVALID = 0,
    ATTN_DTYPE_F32 = 1,
    ATTN_DTYPE_F16 = 2,
    ATTN_DTYPE_BF16 = 3,
    ATTN_DTYPE_F64 = 4,
    ATTN_DTYPE_BOOL = 5,
    ATTN_DTYPE_U8 = 6,
    ATTN_DTYPE_I64 = 7,
    ATTN_DTYPE_I32 = 8,
    ATTN_DTYPE_Q8_0 = 9, /* KV storage only: blocks of 32 int8 + one f16 scale (llama.cpp's q8_0) */
    /* KV storage only (docs/SEMANTICS.md "KV formats"): */
    ATTN_DTYPE_FP8_E4M3 = 10, /* 8-bit float e4m3fn (max 448), read as value * scale (per tensor or kv head) */
    ATTN_DTYPE_FP8_E5M2 = 11, /* 8-bit float e5m2 (max 57344), read as value * scale */
    ATTN_DTYPE_KV_INT8 = 12,  /* uint8 codes, one (scale, zero) per token and kv head: x = q scale + zero */
    ATTN_DTYPE_KV_INT4 = 13,  /* 4-bit codes as KV_INT8; byte d: element d (low nibble), d + D/2 (high) */
    ATTN_DTYPE_Q4_0 = 14      /* blocks of 32 4-bit values + one f16 scale (llama.cpp's q4_0) */
} attn_dtype;

/* ------------------------------------------------------------------------ */
/* Scaled dot-product attention (the core)                                   */
/* ------------------------------------------------------------------------ */

typedef enum attn_causal {
    ATTN_CAUSAL_NONE = 0,
    ATTN_CAUSAL_TOP_LEFT = 1,    /* key j visible to query i iff j <= i (PyTorch is_causal) */
    ATTN_CAUSAL_BOTTOM_RIGHT = 2 /* iff j <= i + (Sk - Sq) (FlashAttention, KV cache) */
} attn_causal;

typedef enum attn_mask_polarity {
    ATTN_MASK_UNSET = 0,             /* invalid when a mask is given: polarity must be explicit */
    ATTN_MASK_TRUE_MEANS_MASKED = 1, /* seed convention: true = padding, ignored */
    ATTN_MASK_TRUE_MEANS_KEEP = 2    /* true = attend to this key */
} attn_mask_polarity;

typedef enum attn_impl {
    ATTN_IMPL_AUTO = 0, /* the fastest path that supports the request */
    ATTN_IMPL_REF = 1,  /* naive reference: materialized scores per row */
    ATTN_IMPL_FAST = 2  /* fused tiled kernel; ATTN_E_UNSUPPORTED if unavailable */
} attn_impl;

/* The arithmetic of the products Q K^T and P V (docs/SEMANTICS.md, "Math
 * modes"). Never chosen silently: the default is STRICT.
 *   STRICT  float32 products of the stored values (every bitwise rule kept).
 *   DATA    each product takes its operands in the data's storage type and
 *           accumulates in float32: q rounded (nearest even) to K's type
 *           (f16, bf16; an integer K: q quantized to int8, per 32-value
 *           block as q8_0 against q8_0 / q4_0 keys, with one scale a row
 *           against int8 / int4 keys, and Q K^T in K's integers, llama.cpp's
 *           q8_0 dots), the scale applied to the float32
 *           score (fp8 K: q rounded to bf16, which holds fp8's values); the
 *           unnormalized P (2^(s - m), m a running row max) rounded to V's
 *           type (f16, bf16; fp8: bf16; other V types: P stays float32) and
 *           the row sum taken over the rounded P. Scores, maxima,
 *           exponentials, sums, lse and the output accumulator stay float32.
 *           For float32 data DATA is STRICT.
 *   BF16    DATA, with float32 data also rounded to bf16 for the products.
 * The rounding above is what a kernel table with product kernels for the
 * type computes (bf16 / f16 / int8 instructions); for a type it has none for,
 * a table runs DATA and BF16 as STRICT (the rounding would cost time and buy
 * nothing there; attn_math_rounds / attn_math_products say which). So in
 * DATA and BF16 results may differ between kernel tables (never between
 * thread counts), always within the accuracy rule of docs/SEMANTICS.md.
 * The backward in DATA / BF16 rounds its products' operands the same way:
 * q, k, v as the forward; dO, the normalized P (for dV = P^T dO) and dS =
 * d loss / d(q.k), scale and softcap derivative included (for dQ = dS K,
 * dK = dS^T Q), to V's type (BF16 mode: bf16); dP, Di, the P inside dS and
 * the gradients' float32 sums are not rounded (PyTorch rounds gradients to
 * bf16 after every block: libattn does not). The block API (ring attention)
 * and attn_sdpa_weights run strict in every mode. Dropout where the mode
 * rounds P is ATTN_E_UNSUPPORTED, forward and backward. */
typedef enum attn_math { ATTN_MATH_STRICT = 0, ATTN_MATH_DATA = 1, ATTN_MATH_BF16 = 2 } attn_math;

/* A strided 4-D view (B, H, S, D) with a contiguous last dimension.
 * Strides are in elements; a stride of 0 broadcasts. */
typedef struct attn_view {
    float *data;
    int64_t stride_b, stride_h, stride_s;
} attn_view;

/* ---- Programmable attention (FlexAttention's score_mod, mask_mod, BlockMask) ----
 * A rectangle of scores handed to a callback: query rows i0 .. i0 + rows - 1
 * and keys j0 .. j0 + cols - 1 of batch row b and query head h (row and key
 * indices are the call's: 0 .. Sq - 1 and 0 .. Sk - 1; packed sequences: the
 * packed positions; a KV cache: its positions). */
typedef struct attn_tile {
    int64_t b, h, i0, j0, rows, cols;
} attn_tile;

/* score_mod on a tile: s[r * ld + c] holds the score of (i0 + r, j0 + c) in
 * natural units after the scale and the built-in modifiers (softcap, ALiBi,
 * attn_bias); the function replaces each by its new score. ds is NULL in the
 * forward; the backward (only with score_mod_grad set) passes ds and the
 * function also writes ds[r * ld + c] = d new / d old there. Cells of keys a
 * rule hides may hold any value and what is written there is ignored. */
typedef void (*attn_score_mod_fn)(void *ctx, const attn_tile *t, float *s, int64_t ld, float *ds);

/* mask_mod on a tile: keep[r * ld + c] = nonzero if (i0 + r, j0 + c) may
 * take part (FlexAttention's mask_mod returning True), 0 if not. */
typedef void (*attn_mask_mod_fn)(void *ctx, const attn_tile *t, uint8_t *keep, int64_t ld);

/* A block-sparse mask (FlexAttention's BlockMask): query rows in blocks of
 * q_block and keys in blocks of kv_block; per (batch row, head, query block)
 * each key block is full (every pair takes part: mask_mod is not called),
 * partial (mask_mod decides each pair; without mask_mod, all take part) or
 * empty (no pair takes part: the block is never loaded or multiplied).
 * Opaque: built from the caller's arrays (attn_block_mask_create) or from a
 * mask_mod evaluated over the whole grid (attn_block_mask_from_mod). */
typedef struct attn_block_mask attn_block_mask;

/* FlexAttention's BlockMask arrays, int32, C order, nq = ceil(q_len /
 * q_block) query blocks and nkv = ceil(kv_len / kv_block) key blocks:
 *   kv_num_blocks (B, H, nq), kv_indices (B, H, nq, nkv): the partial key
 *   blocks of each query block (the first kv_num_blocks of its row);
 *   full_kv_num_blocks, full_kv_indices: the same for the full blocks, or NULL.
 * B and H are the call's batch and query heads, or 1 (one mask for all). A
 * key block listed twice in a row, in either list, is refused. */
typedef struct attn_block_mask_arrays {
    int64_t B, H, q_len, kv_len, q_block, kv_block;
    const int32_t *kv_num_blocks, *kv_indices;
    const int32_t *full_kv_num_blocks, *full_kv_indices;
} attn_block_mask_arrays;

/* Which keys query row i of sequence b sees: the one definition every path
 * (reference, fused, decode, ring) implements (docs/SEMANTICS.md).
 *   Sk_b = seqlens_k ? seqlens_k[b] : Sk          keys that exist
 *   off  = causal == TOP_LEFT ? 0 : Sk_b - Sq     where the last query sits
 *   key j is visible iff  0 <= j < Sk_b
 *     and (causal == NONE  or  j <= i + off)
 *     and (!window  or  ((left < 0 or j >= i + off - left) and
 *                        (right < 0 or j <= i + off + right)))
 *     and (attention_chunk C == 0  or  floor((i + off) / C) == floor(j / C))
 *     and the padding mask does not hide j
 *     and (attn_mask == NULL  or  attn_mask(b, h, i, j) != 0).
 * (For a block of a larger problem, i, j, Sq and Sk are the global ones:
 * see q_start / k_start below.)
 * Score of a visible key: s = scale * q.k; then, if softcap > 0,
 * s = softcap * tanh(s / softcap); then, with alibi_slopes,
 * s += -slope_h * |i + off - j|; then, with attn_bias, s += attn_bias(b, h, i, j)
 * (-inf hides the key). A row with no visible key gives out = 0,
 * lse = -inf and zero gradients. With sinks, row (b, h, i)'s softmax runs
 * over its visible scores and the logit sinks[h], which carries no value:
 * out = sum_j e^(s_j) v_j / (sum_j e^(s_j) + e^(sinks[h])), lse includes
 * it, and a row with no visible key gives out = 0 and lse = sinks[h]. */
typedef struct attn_sdpa_desc {
    int64_t B, H, Sq, Sk, D, Dv;
    float scale; /* scores = scale * q.k; see attn_default_scale */
    attn_causal causal;
    const uint8_t *key_mask;   /* (B, Sk) padding mask, or NULL */
    int64_t key_mask_stride_b; /* elements between batch rows of key_mask */
    attn_mask_polarity key_mask_polarity;
    const attn_dropout *dropout; /* on the attention weights (B,H,Sq,Sk), or NULL */
    attn_impl impl;
    /* ---- inference features (every field's zero value turns it off) ---- */
    int64_t Hkv;                       /* key/value heads (GQA/MQA): k, v are (B, Hkv, Sk, .); query head
                                        * h reads kv head h / (H / Hkv). 0 means Hkv = H. H % Hkv == 0. */
    const void *seqlens_k;             /* (B): keys j >= seqlens_k[b] do not exist for sequence b
                                        * (0 <= seqlens_k[b] <= Sk), or NULL (all Sk keys) */
    attn_dtype seqlens_k_dtype;        /* ATTN_DTYPE_I32 or ATTN_DTYPE_I64 (0 means I64) */
    int window;                        /* 1: the sliding window below applies */
    int64_t window_left, window_right; /* -1 = unbounded on that side */
    float softcap;                     /* > 0: s = softcap * tanh(s / softcap), Gemma 2 */
    const float *alibi_slopes;         /* (H) or NULL: s += -slope_h * |i + off - j| */
    attn_dtype qkv_dtype;              /* element type of q, k, v: F32 (0 means F32), F16 or BF16; a 16-bit view's
                                        * data point to uint16_t elements (strides stay in elements). Read as
                                        * float32 with float32 accumulation; out, lse, dout and the gradients
                                        * are always float32. */
    /* ---- a block of a larger problem (context parallel, ring attention; zero = off) ---- */
    int64_t q_start, k_start;   /* global positions of local query row 0 and local key 0 */
    int64_t Sq_total, Sk_total; /* global lengths (0 means Sq, Sk): q_start + Sq <= Sq_total and
                                 * k_start + Sk <= Sk_total. The rule below then reads i and j as
                                 * global positions (i + q_start, j + k_start) with Sq_total and
                                 * Sk_total for Sq and Sk; seqlens_k and key_mask are global
                                 * ((B, Sk_total) mask). Dropout is refused (ATTN_E_UNSUPPORTED). */
    /* ---- newer rules (zero = off) ---- */
    int64_t attention_chunk; /* C > 0: chunked local attention (Llama 4): row i sees key j only if
                              * floor((i + off) / C) == floor(j / C), positions global; < 0 is ATTN_E_INVALID */
    const float *sinks;      /* (H) finite logits, or NULL: attention sinks (gpt-oss, StreamingLLM), see above;
                              * the block API refuses them (ATTN_E_UNSUPPORTED) */
    float *dsinks;           /* (H) or NULL: the backward writes d loss / d sinks here when sinks are given */
    /* Dense mask and bias, broadcastable to (B, H, Sq, Sk) (PyTorch's attn_mask, bool and float): element
     * (b, h, i, j) at b * strides[0] + h * strides[1] + i * strides[2] + j * strides[3] (elements; a 0 stride
     * broadcasts that dimension); h is the query head, i and j the call's rows and keys (a KV cache: its
     * positions). The block API refuses them (ATTN_E_UNSUPPORTED). */
    const uint8_t *attn_mask; /* nonzero = the pair takes part, or NULL */
    int64_t attn_mask_strides[4];
    const float *attn_bias; /* added to the scores after scale and softcap, with ALiBi, or NULL */
    int64_t attn_bias_strides[4];
    float *dbias; /* with attn_bias, or NULL: the backward writes d loss / d bias here, with attn_bias_strides
                   * (summed over the broadcast dims: the bias's own shape) */
    /* Packed variable-length batches (FlashAttention's varlen): with B = 1, the Sq query rows and Sk keys
     * hold nseq sequences back to back; sequence s is rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) against
     * keys [cu_seqlens_k[s], cu_seqlens_k[s+1]), its own problem: the causal alignment, window and chunks
     * apply within it (positions counted from its start). q, k, v, out are views of (T, H, D) buffers
     * (stride_h = D, stride_s = H * D). Both arrays start at 0, never decrease and end at Sq and Sk;
     * not combined with seqlens_k, key_mask, ALiBi or the block API. */
    const int32_t *cu_seqlens_q, *cu_seqlens_k; /* (nseq + 1) each, or NULL */
    int64_t nseq;
    /* ---- arithmetic (0.3) ---- */
    attn_math math; /* the products' arithmetic (see attn_math); 0 = ATTN_MATH_STRICT */
    /* ---- programmable attention (0.3; FlexAttention; docs/SEMANTICS.md, "Programmable attention") ----
     * score_mod runs after the built-in modifiers (scale, softcap, ALiBi, attn_bias); then a pair takes
     * part iff the built-in rule above lets it and the block mask / mask_mod do: with block_mask, its
     * full blocks take part, its partial ones where mask_mod says so (all of them without mask_mod), the
     * rest not; without block_mask, where mask_mod says so. block_mask's q_len must be Sq and its
     * kv_len at least Sk. The callbacks may be called any number of times, on tiles of any size, in any
     * order and from several threads at once (no side effects). The backward with score_mod needs
     * score_mod_grad (ATTN_E_UNSUPPORTED without); the block API refuses all three. */
    attn_score_mod_fn score_mod; /* or NULL */
    void *score_mod_ctx;         /* passed to score_mod */
    int score_mod_grad;          /* 1: score_mod writes ds when the backward asks */
    attn_mask_mod_fn mask_mod;   /* or NULL */
    void *mask_mod_ctx;          /* passed to mask_mod */
    const attn_block_mask *block_mask; /* or NULL */
} attn_sdpa_desc;

/* A block mask from the caller's arrays (copied and checked: the shapes,
 * every index in [0, nkv), no key block twice in a row); *out to free with
 * attn_block_mask_free. */
ATTN_API attn_status attn_block_mask_create(const attn_block_mask_arrays *a, attn_block_mask **out);
/* A block mask from mask_mod evaluated on every (b, h) (B, H: 1 broadcasts)
 * over q_len x kv_len in tiles of q_block x kv_block (FlexAttention's
 * create_block_mask): a block is full when every pair is kept, empty when
 * none is (pairs past q_len / kv_len count as not kept), else partial. */
ATTN_API attn_status attn_block_mask_from_mod(attn_mask_mod_fn mask_mod, void *ctx, int64_t B, int64_t H,
                                              int64_t q_len, int64_t kv_len, int64_t q_block, int64_t kv_block,
                                              attn_block_mask **out);
/* The same, also storing the partial blocks' keep bytes (q_block x
 * kv_block bytes each) when they fit in max_bytes (else none, as
 * attn_block_mask_from_mod): a call with this mask and no mask_mod reads
 * them instead of calling one (the same pairs; mask_mod, if the call gives
 * one, still decides). The mod is called twice on partial blocks here. */
ATTN_API attn_status attn_block_mask_from_mod_stored(attn_mask_mod_fn mask_mod, void *ctx, int64_t B, int64_t H,
                                                     int64_t q_len, int64_t kv_len, int64_t q_block, int64_t kv_block,
                                                     size_t max_bytes, attn_block_mask **out);
/* 1 if m stores its partial blocks' bytes, else 0 */
ATTN_API int attn_block_mask_stored(const attn_block_mask *m);
ATTN_API void attn_block_mask_free(attn_block_mask *m);
/* The mask's arrays in FlexAttention's layout (owned by m: valid while m is),
 * the partial and full lists of every row in ascending key-block order for a
 * mask built from a mod, in the caller's order for one built from arrays. */
ATTN_API attn_status attn_block_mask_arrays_get(const attn_block_mask *m, attn_block_mask_arrays *out);
/* Block (qb, kb) of (b, h): 0 empty, 1 partial, 2 full; -1 out of range. */
ATTN_API int attn_block_mask_block(const attn_block_mask *m, int64_t b, int64_t h, int64_t qb, int64_t kb);

/* For score_mod callbacks: s[r * ld + c] = cap tanh(s / cap) on a rows x
 * cols tile with the kernels the built-in softcap runs (the same values),
 * and with ds (same layout, or NULL) d new / d old = 1 - tanh^2. Nothing
 * for cap <= 0 or an empty tile. */
ATTN_API void attn_tile_softcap(float *s, int64_t ld, int64_t rows, int64_t cols, float cap, float *ds);

/* A descriptor with every feature off: impl AUTO, scale 1/sqrt(D), no mask,
 * no dropout, Hkv = 0 (= H), no window (left = right = -1). */
ATTN_API void attn_sdpa_desc_init(attn_sdpa_desc *d, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D,
                                  int64_t Dv);

/* Name of the SIMD kernels the fused path uses on this CPU: "avx512",
 * "avx2" or "generic", or a variant of them (docs/API.md: "avx512-256",
 * "-vnni" and "-bf16" forms). The environment variable ATTN_ISA (read once)
 * forces a set: those names, "avx512-simde" (the AVX-512 source run
 * through SIMD Everywhere's emulation on an AVX2 CPU: for tests, slow; only
 * in builds made with libsimde-dev) or "auto" (the default: the best this
 * CPU runs). */
ATTN_API const char *attn_kernel_name(void);
/* How these kernels carry the products of ATTN_MATH_DATA and ATTN_MATH_BF16,
 * per storage type (see attn_math_rounds). */
ATTN_API const char *attn_math_products(void);
/* 1 when these kernels compute ATTN_MATH_DATA / BF16's rounded products for
 * K / V stored as kv_type (ATTN_DTYPE_F32: BF16 mode's, DATA rounds nothing
 * for it); 0: those modes run as ATTN_MATH_STRICT for
 * that type (see attn_math). */
ATTN_API int attn_math_rounds(attn_dtype kv_type);
/* ATTN_OK, or why ATTN_ISA cannot be honoured: ATTN_E_UNSUPPORTED when it
 * names a kernel set this CPU or build cannot run ("avx2" without AVX2/FMA/
 * F16C, "avx512" without AVX-512 F/BW/DQ/VL and the OS's ZMM state,
 * "avx512-simde" in a build without SIMDe), ATTN_E_INVALID for an unknown
 * name. Every fused call (forward, backward, decode, blocks) then returns
 * this status instead of running other kernels than the ones asked for. */
ATTN_API attn_status attn_kernel_status(void);

/* Scratch memory: the fused kernels keep the large buffers a call frees
 * (packed K/V panels, gradient partials) for the next call instead of
 * returning them to the system, up to ATTN_CACHE_MB megabytes (environment
 * variable, read once; default 256, 0 turns the cache off). Fresh pages cost
 * a page fault and zeroing each: without the cache a causal backward spent
 * 11% of its cycles in the kernel. This returns every cached block now
 * (thread-safe; later calls simply allocate again). */
ATTN_API void attn_release_cached_memory(void);

/* 1/sqrt(D) as PyTorch computes it for layers that divide by sqrt(d). */
ATTN_API float attn_default_scale(int64_t D);

/* out = dropout(softmax(mask(scale * q k^T))) v, per (b, h).
 *   q (B,H,Sq,D)  k (B,H,Sk,D)  v (B,H,Sk,Dv)  out (B,H,Sq,Dv)
 *   lse (B,H,Sq) contiguous, optional: log-sum-exp of the scaled, masked
 *   scores per row (-INFINITY for a row with no visible key).
 * A query row with no visible key gives a zero output row. */
ATTN_API attn_status attn_sdpa_forward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                                       float *lse);

/* Backward of attn_sdpa_forward with the same descriptor (same masks, scale
 * and dropout: the dropout keep decisions are regenerated, not stored).
 *   dout (B,H,Sq,Dv) -> dq (B,H,Sq,D), dk (B,H,Sk,D), dv (B,H,Sk,Dv): WRITTEN
 *   (not accumulated). Rows with no visible key get zero gradients.
 *   out (the forward output) and lse (its log-sum-exp) may be given or left
 *   empty ({0} / NULL): both paths recompute the softmax statistics they
 *   need, because PyTorch's softmax backward, dS = P (dP - rowsum(P dP)),
 *   only keeps float32 accuracy on peaked softmax when rowsum(P dP) is
 *   formed from the very P and dP it is subtracted from (docs/SEMANTICS.md,
 *   "Precision"). */
ATTN_API attn_status attn_sdpa_backward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                                        attn_view dout, const float *lse, attn_view dq, attn_view dk, attn_view dv);

/* Inspection (reference path, O(Sq*Sk) memory): the materialized
 *   scores  (B,H,Sq,Sk): scale * q.k with masked entries = -INFINITY
 *   weights (B,H,Sq,Sk): softmax of scores (zero rows when nothing is visible),
 *                        dropout applied when d->dropout is set.
 * Either output may be NULL. */
ATTN_API attn_status attn_sdpa_weights(const attn_sdpa_desc *d, attn_view q, attn_view k, float *scores,
                                       float *weights);

/* Building blocks of context-parallel (ring) attention: one block of query
 * rows against one block of keys of a larger problem, the block described
 * by q_start / k_start / Sq_total / Sk_total (global positions). Forward:
 * attn_sdpa_forward on each block, then merge the blocks' (out, lse) per row
 * by log-sum-exp. Backward needs the whole rows' softmax statistics, folded
 * over every key block first:
 *   m, l, t (B, H, Sq), set by the caller to -INFINITY, 0, 0; each call folds
 *   one key block in. Base 2, as the fused kernels compute them: with
 *   u = s * log2(e) (s the scaled, modified score), m = row max of u,
 *   l = sum 2^(u - m), t = sum 2^(u - m) dP with dP = dout . v; so the
 *   row's log-sum-exp is (m + log2(l)) * ln(2). Pass them to
 *   attn_sdpa_block_backward unchanged (converting m to natural units and
 *   back would round it, and every P of the row with it). Fold the blocks
 *   in a fixed order for reproducible results. */
ATTN_API attn_status attn_sdpa_block_stats(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v,
                                           attn_view dout, float *m, float *l, float *t);
/* One key block's share of the gradients given the whole rows' m, l, t:
 * dq (B,H,Sq,D) from this block's keys, dk, dv of this block's keys; all
 * WRITTEN (the caller sums dq over key blocks and dk, dv over query
 * blocks). Both block calls run the fused path; dropout is refused. */
ATTN_API attn_status attn_sdpa_block_backward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v,
                                              attn_view dout, const float *m, const float *l, const float *t,
                                              attn_view dq, attn_view dk, attn_view dv);

/* ------------------------------------------------------------------------ */
/* KV cache (autoregressive inference)                                       */
/* ------------------------------------------------------------------------ */

/* Keys and values of B sequences, Hkv heads each, up to T tokens per
 * sequence: contiguous ((B, Hkv, T, D) arrays) or paged (a shared pool of
 * fixed-size pages and a page table per sequence, as vLLM and FlashInfer
 * do, so that sequences of very different lengths share one pool). */
typedef struct attn_kv_cache attn_kv_cache;

typedef struct attn_kv_cache_config {
    int64_t batch;      /* B: sequences */
    int64_t kv_heads;   /* Hkv */
    int64_t capacity;   /* T: tokens per sequence at most */
    int64_t head_dim;   /* D */
    int64_t v_head_dim; /* Dv; 0 means D */
    attn_dtype dtype;   /* storage: ATTN_DTYPE_F32 (0 means F32), ATTN_DTYPE_F16 or ATTN_DTYPE_BF16 (appends round
                         * to nearest even), or ATTN_DTYPE_Q8_0 (head sizes multiples of 32; each block of 32
                         * values stores d = max|x| / 127 as f16 and round(x / d) as int8); attention reads
                         * the stored values as float32 with float32 accumulation */
    int64_t page_size;  /* 0: contiguous; > 0: paged, tokens per page */
    int64_t num_pages;  /* paged: pages in the pool; 0 means enough for every sequence at capacity */
    attn_dtype v_dtype; /* V's storage when it differs from K's (llama.cpp's -ctk / -ctv), 0: dtype */
    /* the serving formats (docs/SEMANTICS.md "KV formats"): FP8_E4M3 / FP8_E5M2 store x / scale and
     * read value * scale, the scale per tensor (len 1) or per kv head (len kv_heads), NULL: 1 (copied
     * at create; get_config then points at the cache's copies); KV_INT8 / KV_INT4 keep their own
     * (scale, zero) per token and kv head; Q4_0 as llama.cpp (head sizes multiples of 32) */
    const float *k_scale, *v_scale;
    int64_t k_scale_len, v_scale_len;
} attn_kv_cache_config;

ATTN_API attn_status attn_kv_cache_create(const attn_kv_cache_config *c, attn_kv_cache **out);
ATTN_API void attn_kv_cache_free(attn_kv_cache *c);
ATTN_API const attn_kv_cache_config *attn_kv_cache_get_config(const attn_kv_cache *c);
/* Tokens cached for sequence b; -1 if c is NULL or b is out of range. */
ATTN_API int64_t attn_kv_cache_len(const attn_kv_cache *c, int64_t b);
/* Paged: pages not in use. Contiguous: 0. */
ATTN_API int64_t attn_kv_cache_free_pages(const attn_kv_cache *c);
/* Append n[b] tokens to every sequence b (n[b] may be 0): k is a strided
 * (B, Hkv, n_max, D) view and v a (B, Hkv, n_max, Dv) view; sequence b
 * takes rows 0 .. n[b]-1 (a chunk of a prefill, or one decoded token). All
 * or nothing: ATTN_E_CONTEXT if a sequence would exceed the capacity,
 * ATTN_E_NOMEM if the page pool is exhausted; then nothing changes. */
ATTN_API attn_status attn_kv_cache_append(attn_kv_cache *c, const int64_t *n, attn_view k, attn_view v);
/* Forget sequence b's tokens (b = -1: every sequence); pages return to the pool. */
ATTN_API attn_status attn_kv_cache_reset(attn_kv_cache *c, int64_t b);
/* Keep the first len tokens of sequence b (len <= its length). */
ATTN_API attn_status attn_kv_cache_trim(attn_kv_cache *c, int64_t b, int64_t len);
/* Sequence dst becomes a copy of sequence src (beam search, parallel
 * sampling, a shared system prompt): dst's own tokens are dropped first;
 * in a paged cache dst then shares src's pages (each page counts the
 * sequences that refer to it and is free only when none does; an append to
 * a sequence whose partly filled last page is shared copies that page first,
 * so neither sequence sees the other's new tokens); a contiguous cache
 * copies the rows. src == dst changes nothing. ATTN_E_INVALID for an index
 * out of range. */
ATTN_API attn_status attn_kv_cache_fork(attn_kv_cache *c, int64_t src, int64_t dst);
/* Copy out key and value j of sequence b, kv head hk (either may be NULL). */
ATTN_API attn_status attn_kv_cache_read(const attn_kv_cache *c, int64_t b, int64_t hk, int64_t j, float *k, float *v);
/* Attention of q (B, H, Sq, D) over each sequence's cached tokens, into out
 * (B, H, Sq, Dv) and optionally lse (B, H, Sq). d describes the call as for
 * attn_sdpa_forward except: Sk, Hkv and seqlens_k come from the cache (d->Hkv
 * must be 0 or the cache's, d->seqlens_k NULL), a key_mask is (B, T) with
 * stride key_mask_stride_b, q is float32, and dropout is ATTN_E_UNSUPPORTED. A dense
 * attn_mask / attn_bias is indexed by cache position j (a tree mask of draft tokens); its buffer may
 * be as wide as the capacity T (strides[2] = T: one buffer a serving loop reuses every step) or as
 * the longest sequence: element (b, h, i, j) is read only for j < that sequence's length, and
 * positions at or past the length never take part, whatever the buffer holds there. The usual
 * causal alignment for a cache is ATTN_CAUSAL_BOTTOM_RIGHT: the Sq queries
 * are the sequence's last Sq tokens. Sq <= 16 runs flash-decoding straight
 * from the cache (pages included); longer query blocks run the fused kernel
 * (a paged cache is first gathered into a contiguous buffer). */
ATTN_API attn_status attn_kv_cache_attend(const attn_kv_cache *c, const attn_sdpa_desc *d, attn_view q, attn_view out,
                                          float *lse);

/* A shard of each sequence's keys (a KV cache sharded over machines,
 * libattn_mpi's attn_shard_decode): the cache holds part of every
 * sequence, its local key j at global position (j / block) * stride +
 * offset + j % block (contiguous ranges: block >= the local capacity,
 * offset the range's start; round-robin by pages of P tokens over n ranks:
 * block P, stride n P, offset r P); global_len (B): each sequence's length
 * over every shard. */
typedef struct attn_kv_positions {
    const int64_t *global_len;
    int64_t block, stride, offset;
} attn_kv_positions;

/* Attention of q over this shard's keys as part of the global problem: d
 * describes the whole sequences as attn_kv_cache_attend does (d->Sk 0 or
 * the longest global length, d->seqlens_k NULL: the lengths are
 * pos->global_len), and every rule reads global positions (causal
 * alignment, window, chunks, ALiBi, a key_mask (B, Sk), a dense mask or
 * bias over global keys: (., ., Sq, Sk)). out and lse are this shard's
 * share: merged over the shards with attn_merge_states (rank order) they
 * give attention over the whole cache; a shard with no visible key gives
 * zeros and lse -inf (with sinks: the sink's lse; give sinks to one share
 * only, or to the merge). Decode only: Sq <= 16 (ATTN_E_UNSUPPORTED past it
 * and for ATTN_IMPL_REF). ATTN_E_INVALID when a local key's global
 * position is not below its sequence's global length, block < 1, stride <
 * block or offset < 0. */
ATTN_API attn_status attn_kv_cache_attend_at(const attn_kv_cache *c, const attn_sdpa_desc *d,
                                             const attn_kv_positions *pos, attn_view q, attn_view out, float *lse);

/* ------------------------------------------------------------------------ */
/* Attention over caller-owned pages (serving engines: FlashInfer's and      */
/* vLLM's conventions; docs/API.md "Caller-owned pages")                     */
/* ------------------------------------------------------------------------ */

/* How a page holds its rows: NHD [page][token][kv head][dim] or HND
 * [page][kv head][token][dim] (FlashInfer's kv_layout). */
typedef enum attn_kv_layout { ATTN_KV_NHD = 0, ATTN_KV_HND = 1 } attn_kv_layout;

/* Pages the caller owns, addressed as FlashInfer's CSR page table: sequence
 * b's keys are the pages kv_indices[kv_indptr[b] .. kv_indptr[b + 1]) in
 * order, every one full except the last, which holds kv_last_page_len[b]
 * tokens (1 .. page_size; 0 exactly when the sequence has no page: an empty
 * sequence). kv_indptr has B + 1 entries, starts at 0 and never decreases;
 * every index is in [0, num_pages). K and V are separate arrays of type
 * dtype (F32, F16, BF16, or Q8_0 blocks with D, Dv and the strides
 * multiples of 32); k_strides / v_strides: elements between pages, tokens
 * and kv heads, or all three 0 for the layout's packed strides (NHD: ps Hkv
 * D, Hkv D, D; HND: Hkv ps D, D, ps D). Nothing is copied: attention reads
 * the pages in place; attn_paged_append writes them. v_pages NULL: MLA's
 * latent cache (DeepSeek; FlashMLA): one row of D values per token and
 * latent head, K = the row, V = its first Dv values (Dv <= D), no V pages
 * (v_strides unused). */
typedef struct attn_paged_kv {
    attn_dtype dtype;
    attn_kv_layout layout;
    int64_t num_pages, page_size, Hkv, D, Dv;
    void *k_pages, *v_pages;
    int64_t k_strides[3], v_strides[3];
    const int32_t *kv_indptr, *kv_indices, *kv_last_page_len;
    attn_dtype v_dtype; /* V's type when it differs from K's (llama.cpp's -ctk / -ctv), 0: dtype */
    /* FP8 pages (vLLM's k_scale / v_scale): stored x / scale, read value * scale; per tensor (len 1)
     * or per kv head (len Hkv); NULL: 1; finite and > 0 */
    const float *k_scale, *v_scale;
    int64_t k_scale_len, v_scale_len;
    /* KV_INT8 / KV_INT4 pages (LMDeploy): one (scale, zero) float pair per token and kv head, x = q
     * scale + zero, written by attn_paged_append; kp_strides / vp_strides in pairs between pages,
     * tokens and kv heads, all 0 for the layout's packed ones (NHD: ps Hkv, Hkv, 1; HND: Hkv ps, 1, ps);
     * MLA (no V pages): V's pairs are K's */
    float *k_params, *v_params;
    int64_t kp_strides[3], vp_strides[3];
} attn_paged_kv;

/* Attention of the queries over each sequence's pages, into out (and lse).
 * d describes the call as for attn_kv_cache_attend: d->B sequences, d->H
 * query heads, d->Hkv 0 or kv->Hkv, d->D / d->Dv kv's, Sk and seqlens_k
 * from the pages (d->seqlens_k NULL), q float32, no dropout; every other
 * option as there (GQA, causal alignments, window, softcap, ALiBi, sinks,
 * masks indexed by the sequence's key position, the math modes). Without
 * qo_indptr: q (B, H, Sq, D), out (B, H, Sq, Dv), lse (B, H, Sq), as
 * attn_sdpa_forward (decode: one or a few rows per sequence). With
 * qo_indptr (B + 1 entries from 0, non-decreasing, qo_indptr[B] = d->Sq):
 * packed queries of every sequence, sequence b's rows [qo_indptr[b],
 * qo_indptr[b + 1]) of the views q (1, H, Sq, D) and out (1, H, Sq, Dv)
 * (their batch stride unused), lse (Sq, H) token-major (FlashInfer's
 * prefill and chunked prefill); a dense mask or bias is then (1, H, Sq, .)
 * over the packed rows and a key_mask row b per sequence. A sequence with
 * no keys gives zeros and lse -inf. Bad input (indices, indptr, lengths,
 * shapes, strides) gets a status and writes nothing. */
ATTN_API attn_status attn_paged_attention(const attn_sdpa_desc *d, attn_view q, const attn_paged_kv *kv,
                                          const int32_t *qo_indptr, attn_view out, float *lse);

/* Write T rows of K (T, Hkv, D) and V (T, Hkv, Dv), float32, into the
 * pages: row t goes to slot slot_mapping[t] = page * page_size + offset
 * (vLLM's reshape_and_cache), a negative slot skips the row. Rounding to
 * nearest even (q8_0: quantized per block); without V pages (MLA) only k
 * is written and v may be NULL. kv_indptr, kv_indices and kv_last_page_len
 * are not read. A slot past the pages is ATTN_E_INVALID
 * and nothing is written; of two rows with one slot the later stays. */
ATTN_API attn_status attn_paged_append(const attn_paged_kv *kv, int64_t T, const float *k, const float *v,
                                       const int64_t *slot_mapping);

/* Merge two attention states over disjoint key sets (cascade attention,
 * context parallelism): rows (n) of out_a, out_b (n, Dv) with their lse
 * (natural log): lse = log(e^lse_a + e^lse_b), out = (out_a e^lse_a +
 * out_b e^lse_b) / e^lse. A state with lse -inf is empty (its out is not
 * read); both empty: zeros and -inf; NaN propagates. out and lse may be
 * out_a / lse_a (in place). */
ATTN_API attn_status attn_merge_states(int64_t n, int64_t Dv, const float *out_a, const float *lse_a,
                                       const float *out_b, const float *lse_b, float *out, float *lse);

/* ------------------------------------------------------------------------ */
/* safetensors                                                               */
/* ------------------------------------------------------------------------ */

#define ATTN_MAX_DIMS 8

typedef struct attn_st_file attn_st_file;

/* Parse a safetensors file (or buffer; the buffer is copied). Strict: the
 * header length, JSON, dtypes, shapes and offsets are validated; tensors must
 * tile the data section exactly with no overlaps or gaps; trailing bytes after
 * the last tensor are rejected. */
ATTN_API attn_status attn_st_open(const char *path, attn_st_file **out);
ATTN_API attn_status attn_st_open_memory(const void *data, size_t len, attn_st_file **out);
ATTN_API void attn_st_close(attn_st_file *f);
ATTN_API int attn_st_count(const attn_st_file *f);
ATTN_API const char *attn_st_name(const attn_st_file *f, int i); /* NULL if out of range */
/* Returns ATTN_E_NOT_FOUND if absent. shape may be NULL. */
ATTN_API attn_status attn_st_info(const attn_st_file *f, const char *name, attn_dtype *dtype, int *ndim,
                                  int64_t shape[ATTN_MAX_DIMS]);
/* Read a floating tensor (F32/F16/BF16/F64) converted to float32; n must be
 * its element count. */
ATTN_API attn_status attn_st_read_f32(const attn_st_file *f, const char *name, float *out, size_t n);
/* Read a BOOL or U8 tensor as bytes (BOOL values must be 0 or 1). */
ATTN_API attn_status attn_st_read_u8(const attn_st_file *f, const char *name, uint8_t *out, size_t n);
/* Read an F16 or BF16 tensor's 16-bit patterns as they are (no conversion). */
ATTN_API attn_status attn_st_read_u16(const attn_st_file *f, const char *name, uint16_t *out, size_t n);
/* Read an I32 or I64 tensor as int64 (little-endian, as safetensors stores). */
ATTN_API attn_status attn_st_read_i64(const attn_st_file *f, const char *name, int64_t *out, size_t n);

typedef struct attn_st_writer attn_st_writer;
ATTN_API attn_status attn_st_writer_new(attn_st_writer **out);
ATTN_API void attn_st_writer_free(attn_st_writer *w);
/* Copies the data. dtype F32 (data is float*), BOOL/U8 (uint8_t*), I32 (int32_t*) or I64 (int64_t*). */
ATTN_API attn_status attn_st_writer_add(attn_st_writer *w, const char *name, attn_dtype dtype, int ndim,
                                        const int64_t *shape, const void *data);
/* Atomic: writes path.tmp.XXXXXX then renames; an existing file is never
 * left half-written. */
ATTN_API attn_status attn_st_writer_save(const attn_st_writer *w, const char *path);

/* ------------------------------------------------------------------------ */
/* Layers: the seed modules                                                  */
/* ------------------------------------------------------------------------ */

typedef enum attn_layer_kind {
    ATTN_LAYER_SIMPLE = 0,        /* weightless softmax(x x^T) x (seeds 000/002) */
    ATTN_LAYER_SA_V1 = 1,         /* SelfAttention_v1 */
    ATTN_LAYER_SA_V2 = 2,         /* SelfAttention_v2 */
    ATTN_LAYER_CAUSAL = 3,        /* CausalAttention (Raschka) */
    ATTN_LAYER_MHA_WRAPPER = 4,   /* MultiHeadAttentionWrapper */
    ATTN_LAYER_MHA = 5,           /* MultiHeadAttention (Raschka, weight split) */
    ATTN_LAYER_GPT_MHA = 6,       /* nanoGPT MultiHeadAttention of Head */
    ATTN_LAYER_SINGLE_HEAD = 7,   /* Warner SingleHeadAttention */
    ATTN_LAYER_FUSED_MHA = 8,     /* Warner MultiHeadAttetion (fused Wqkv) */
    ATTN_LAYER_BIDIRECTIONAL = 9, /* Warner BidirectionalAttention */
    ATTN_LAYER_CAUSAL_MHA = 10,   /* Warner CausalAttention */
    ATTN_LAYER_CROSS = 11,        /* Warner CausalCrossAttention */
    ATTN_LAYER_KIND_COUNT = 12
} attn_layer_kind;

/* CLI name ("simple", "sa_v1", ...) of a kind, NULL if invalid. */
ATTN_API const char *attn_layer_kind_name(attn_layer_kind k);
/* Parse a CLI name. ATTN_E_INVALID if unknown. */
ATTN_API attn_status attn_layer_kind_parse(const char *name, attn_layer_kind *out);
/* What a kind takes, from the library's table of kinds (docs/LAYERS.md). */
enum {
    ATTN_KIND_CAUSAL = 1 << 0,      /* causal attention (attn_layer_config.causal_align) */
    ATTN_KIND_TAKES_MASK = 1 << 1,  /* forward takes a (B, Sk) padding mask */
    ATTN_KIND_CROSS = 1 << 2,       /* keys and values from a second input y (B, Sk, C) */
    ATTN_KIND_INCREMENTAL = 1 << 3, /* attn_layer_forward_incremental runs it over a KV cache */
    ATTN_KIND_HEADS = 1 << 4,       /* num_heads is a setting (the weights do not tell it) */
    ATTN_KIND_BUFFER = 1 << 5       /* has causal mask buffers of context_length (read from weights) */
};
/* The ATTN_KIND_* flags of a kind; 0 if k is not a kind. */
ATTN_API unsigned attn_layer_kind_flags(attn_layer_kind k);

typedef struct attn_layer_config {
    attn_layer_kind kind;
    int64_t d_in;             /* C: input width (n_embd, hidden_size) */
    int64_t d_out;            /* projected width per module (see docs/LAYERS.md) */
    int64_t num_heads;        /* heads (1 for single-head layers) */
    int64_t context_length;   /* size of mask/tril buffers; 0 = unlimited where allowed */
    int qkv_bias;             /* q/k/v (or Wqkv / Wq / Wkv) projections have a bias */
    int out_bias;             /* output projection has a bias */
    double dropout;           /* dropout on attention weights */
    double out_dropout;       /* dropout on the output (gpt_mha, Warner layers) */
    attn_causal causal_align; /* cross / any causal layer: TOP_LEFT (default when 0) */
} attn_layer_config;

typedef struct attn_layer attn_layer;

/* Fill a config with the seed defaults for a kind: d_out = d_in, one head,
 * bias as the seed class has it, dropout 0. */
ATTN_API void attn_layer_config_default(attn_layer_config *c, attn_layer_kind kind, int64_t d_in, int64_t d_out,
                                        int64_t num_heads);
/* Create with zeroed parameters and the persistent buffers of the seed class. */
ATTN_API attn_status attn_layer_create(const attn_layer_config *c, attn_layer **out);
/* Create from a PyTorch state_dict saved as safetensors. The widths, bias
 * flags, head count (mha_wrapper, gpt_mha) and context length (mask/tril) are
 * read from the tensors; c supplies the kind, num_heads where the weights do
 * not imply it, and dropout probabilities. Buffers are validated. */
ATTN_API attn_status attn_layer_load(const attn_layer_config *c, const attn_st_file *f, attn_layer **out);
/* As attn_layer_load; on failure writes a one-line explanation naming the
 * offending tensor into detail (NUL-terminated, truncated to detail_len). */
ATTN_API attn_status attn_layer_load_ex(const attn_layer_config *c, const attn_st_file *f, attn_layer **out,
                                        char *detail, size_t detail_len);
ATTN_API void attn_layer_free(attn_layer *l);
ATTN_API const attn_layer_config *attn_layer_get_config(const attn_layer *l);

/* Initialize parameters exactly as the seed class's __init__ does under the
 * given generator (torch.manual_seed(s) then Module(...)). */
ATTN_API attn_status attn_layer_init(attn_layer *l, attn_generator *g);

/* Parameters and persistent buffers, in state_dict order. */
ATTN_API int attn_layer_tensor_count(const attn_layer *l);
typedef struct attn_tensor_info {
    const char *name; /* state_dict key */
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    int is_buffer; /* 1 for mask/tril buffers (not trainable) */
    float *data;   /* owned by the layer */
    float *grad;   /* gradient (parameters only; NULL for buffers) */
} attn_tensor_info;
ATTN_API attn_status attn_layer_tensor(const attn_layer *l, int i, attn_tensor_info *out);
/* Save parameters and persistent buffers as a safetensors state_dict. */
ATTN_API attn_status attn_layer_save(const attn_layer *l, const char *path);

typedef struct attn_forward_args {
    const float *x; /* (B, S, C) */
    int64_t B, S;
    const float *y;      /* cross only: (B, Sk, C) */
    int64_t Sk;          /* cross only */
    const uint8_t *mask; /* (B, Sk) padding mask, true = masked (seed convention), or NULL */
    int train;           /* 1: dropout on (needs gen); 0: eval */
    attn_generator *gen; /* the torch default generator in force before forward */
    attn_impl impl;      /* SDPA path */
    float *out;          /* (B, S, d_out_total), see attn_layer_out_width */
    attn_math math;      /* the attention products' arithmetic (0 = STRICT; float32 layers: BF16 rounds) */
} attn_forward_args;

typedef struct attn_backward_args {
    const float *dout; /* (B, S, W): gradient of the loss w.r.t. the last forward's out */
    float *dx;         /* (B, S, C): gradient w.r.t. x, WRITTEN; may be NULL */
    float *dy;         /* cross only: (B, Sk, C) gradient w.r.t. y, WRITTEN; may be NULL */
} attn_backward_args;

/* Width of the output's last dimension. */
ATTN_API int64_t attn_layer_out_width(const attn_layer *l);
/* Forward. The layer keeps what backward needs (a copy of x, y and mask, the
 * projections, and the dropout draws) until the next forward or free. */
ATTN_API attn_status attn_layer_forward(attn_layer *l, const attn_forward_args *a);
/* Backward of the most recent forward on this layer, with the same masks and
 * the same dropout decisions. Parameter gradients are ACCUMULATED (+=) into
 * each parameter's grad, as PyTorch accumulates .grad; dx and dy are WRITTEN.
 * ATTN_E_STATE if no forward has run. */
ATTN_API attn_status attn_layer_backward(attn_layer *l, const attn_backward_args *a);
/* Set every parameter gradient to zero. */
ATTN_API void attn_layer_zero_grad(attn_layer *l);

/* Attention heads of a layer: H for the multi-head kinds, 1 for the
 * single-head ones (0 for NULL). */
ATTN_API int64_t attn_layer_attention_heads(const attn_layer *l);
/* The attention of every head for the input a (what the seed notebooks
 * print as attn_scores and attn_weights), each (B, attn_layer_attention_heads,
 * S, Sk) with heads in state_dict order, either may be NULL:
 *   scores:  the scaled scores, -INFINITY where the key is not visible
 *            (causal, padding, context);
 *   weights: their softmax rows (zeros where a row sees no key). Eval mode when a->train is 0; with a->train and
 * attention dropout the weights are those after dropout, drawn from a->gen as the forward draws them (the output
 * dropout is not drawn). a->out is not used. Like a forward it replaces what the layer kept for backward
 * (attn_layer_backward returns ATTN_E_STATE after it). */
ATTN_API attn_status attn_layer_attention_weights(attn_layer *l, const attn_forward_args *a, float *scores,
                                                  float *weights);

/* Incremental (autoregressive) forward through a KV cache, for the causal
 * kinds (causal, mha_wrapper, mha, gpt_mha, causal_mha), eval mode: the S
 * new tokens of each sequence (a->x, (B, S, C)) are projected, their keys and
 * values appended to the cache, and they attend to everything the cache
 * holds for their sequence (bottom-right causal). Feeding a sequence in
 * chunks gives the full forward's output. The cache must have the shape
 * attn_layer_kv_shape gives (one cache per layer). A padding mask (kinds
 * that take one: causal_mha) covers the cache's positions after the append:
 * a->mask is (B, a->Sk), true = masked, key j of sequence b at
 * a->mask[b * a->Sk + j], a->Sk at least every sequence's new length (the
 * growing attention_mask of left- or right-padded batched generation);
 * chunk by chunk it gives the full forward's output with the same mask.
 * a->train and a->y must be unset (ATTN_E_UNSUPPORTED); a mask for a kind
 * without one is ATTN_E_UNSUPPORTED, a->Sk too short ATTN_E_SHAPE;
 * ATTN_E_CONTEXT if the cache or the layer's context length would be
 * exceeded, and then nothing changes. The
 * call does not prepare a backward (attn_layer_backward returns
 * ATTN_E_STATE after it). */
ATTN_API attn_status attn_layer_forward_incremental(attn_layer *l, attn_kv_cache *cache, const attn_forward_args *a);
/* The KV cache a causal layer needs: kv heads and head size (Dv = D).
 * ATTN_E_UNSUPPORTED for the other kinds. */
ATTN_API attn_status attn_layer_kv_shape(const attn_layer *l, int64_t *kv_heads, int64_t *head_dim);

/* ------------------------------------------------------------------------ */
/* Optimizers (torch.optim.SGD and torch.optim.AdamW semantics)               */
/* ------------------------------------------------------------------------ */

typedef enum attn_optim_kind { ATTN_OPTIM_SGD = 0, ATTN_OPTIM_ADAMW = 1 } attn_optim_kind;

typedef struct attn_optim_config {
    attn_optim_kind kind;
    double lr;           /* default 1e-3 (both) */
    double weight_decay; /* SGD: L2 added to the gradient (default 0); AdamW: decoupled (default 1e-2) */
    int maximize;        /* default 0 */
    /* SGD */
    double momentum;  /* default 0 */
    double dampening; /* default 0 */
    int nesterov;     /* default 0; needs momentum > 0 and dampening == 0 */
    /* AdamW */
    double beta1, beta2; /* defaults 0.9, 0.999 */
    double eps;          /* default 1e-8 */
} attn_optim_config;

typedef struct attn_optim attn_optim;

/* PyTorch's defaults for the kind. */
ATTN_API void attn_optim_config_default(attn_optim_config *c, attn_optim_kind kind);
ATTN_API attn_status attn_optim_create(const attn_optim_config *c, attn_optim **out);
ATTN_API void attn_optim_free(attn_optim *o);
/* Register a parameter (n floats at data, gradient at grad); the name keys
 * the saved state. The optimizer does not own the memory. */
ATTN_API attn_status attn_optim_add_param(attn_optim *o, const char *name, float *data, float *grad, size_t n);
/* Register every trainable parameter of a layer, names prefixed by prefix
 * (may be NULL or ""), e.g. "attn." + "Wqkv.weight". */
ATTN_API attn_status attn_optim_add_layer(attn_optim *o, attn_layer *l, const char *prefix);
/* One optimizer.step() over every registered parameter. */
ATTN_API attn_status attn_optim_step(attn_optim *o);
/* Save / load the optimizer state (step counts, momentum buffers, Adam
 * moments) as safetensors: "<name>.step", "<name>.momentum_buffer",
 * "<name>.exp_avg", "<name>.exp_avg_sq". Load requires the same parameters. */
ATTN_API attn_status attn_optim_save(const attn_optim *o, const char *path);
ATTN_API attn_status attn_optim_load(attn_optim *o, const char *path);

/* 1 when the library this program runs against has the public structs'
 * layouts that this header (the one the program was compiled with) gives
 * them, and the same MAJOR.MINOR; 0 otherwise: then no call that takes a
 * struct is safe. Compiled into the caller, so the sizes are the caller's.
 * Call it once at start-up when the library may be loaded by path (dlopen,
 * a renamed file); the soname already covers ordinary dynamic linking. */
/* the public structs attn_abi_size knows, one list for the library and the header */
#define ATTN_ABI_STRUCTS(X)                                                                                            \
    X(attn_view)                                                                                                       \
    X(attn_sdpa_desc)                                                                                                  \
    X(attn_generator)                                                                                                  \
    X(attn_dropout)                                                                                                    \
    X(attn_kv_cache_config)                                                                                            \
    X(attn_layer_config)                                                                                               \
    X(attn_tensor_info) X(attn_forward_args) X(attn_backward_args) X(attn_optim_config) X(attn_paged_kv)          \
        X(attn_tile) X(attn_block_mask_arrays)
#define ATTN_ABI_ENTRY_(T) {#T, sizeof(T)},
static inline int attn_abi_compatible(void) {
    const struct {
        const char *name;
        size_t size;
    } t[] = {ATTN_ABI_STRUCTS(ATTN_ABI_ENTRY_)};
    if (attn_version_number() / 100 != ATTN_VERSION_NUMBER / 100) return 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (attn_abi_size(t[i].name) != t[i].size) return 0;
    return 1;
}

#ifdef __cplusplus
}
#endif
#endif /* ATTN_H */
