/* Errors that name the argument and the value (attn.h, attn_last_error):
 * the common mistakes of each entry point (SDPA, the KV cache, caller-owned
 * pages, merge_states, safetensors, layers, optimizers, generators) return their status and a line
 * that names the argument, carries the value given and says what was
 * expected; a call that succeeds leaves it empty; it is per thread. */
#include "testutil.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* st is want and the detail holds every one of the (up to 3) strings */
static void expect(const char *what, attn_status st, attn_status want, const char *s1, const char *s2,
                   const char *s3) {
    const char *said = attn_last_error();
    CHECK(said != NULL, "%s: attn_last_error is never NULL", what);
    if (!said) return;
    CHECK(st == want, "%s: status %s, want %s", what, attn_status_string(st), attn_status_string(want));
    const char *need[3] = {s1, s2, s3};
    for (int i = 0; i < 3; i++)
        CHECK(!need[i] || strstr(said, need[i]), "%s: the detail \"%s\" names \"%s\"", what, said, need[i]);
    CHECK(strlen(said) < 300 && !strchr(said, '\n'), "%s: one short line (\"%s\")", what, said);
}

static float q[2 * 4 * 8 * 32], k[2 * 4 * 8 * 32], v[2 * 4 * 8 * 32], o[2 * 4 * 8 * 32];

static void sdpa_mistakes(void) {
    attn_sdpa_desc d;
    attn_view vq = {q, 4 * 8 * 32, 8 * 32, 32}, vk = vq, vv = vq, vo = vq;
    vk.data = k, vv.data = v, vo.data = o;
    vk.stride_b = vv.stride_b = 4 * 8 * 32; /* Hkv heads; the views' sizes are not read past their use */
    CHECK(!strcmp(attn_last_error(), ""), "nothing said before any call");

    attn_sdpa_desc_init(&d, 2, 3, 8, 8, 32, 32), d.Hkv = 2;
    expect("GQA heads", attn_sdpa_forward(&d, vq, vk, vv, vo, NULL), ATTN_E_SHAPE, "Hkv = 2", "3 query heads",
           "multiple");
    attn_sdpa_desc_init(&d, 2, 4, 8, 8, 0, 32);
    expect("head size 0", attn_sdpa_forward(&d, vq, vk, vv, vo, NULL), ATTN_E_SHAPE, "D = 0", ">= 1", NULL);
    attn_sdpa_desc_init(&d, 2, 4, 8, 8, 32, 32);
    attn_view none = vq;
    none.data = NULL;
    expect("no q", attn_sdpa_forward(&d, none, vk, vv, vo, NULL), ATTN_E_INVALID, "q has no data", NULL, NULL);
    expect("no out", attn_sdpa_forward(&d, vq, vk, vv, none, NULL), ATTN_E_INVALID, "out has no data", NULL, NULL);
    d.qkv_dtype = (attn_dtype)99;
    expect("qkv dtype", attn_sdpa_forward(&d, vq, vk, vv, vo, NULL), ATTN_E_DTYPE, "qkv_dtype = 99", "F32", NULL);
    attn_sdpa_desc_init(&d, 2, 4, 8, 8, 32, 32), d.window = 1, d.window_left = -2;
    expect("window", attn_sdpa_forward(&d, vq, vk, vv, vo, NULL), ATTN_E_INVALID, "window_left = -2", NULL, NULL);
    attn_sdpa_desc_init(&d, 2, 4, 8, 8, 32, 32), d.softcap = NAN;
    expect("softcap", attn_sdpa_forward(&d, vq, vk, vv, vo, NULL), ATTN_E_INVALID, "softcap = nan", NULL, NULL);
    attn_sdpa_desc_init(&d, 2, 4, 8, 8, 32, 32), d.scale = INFINITY;
    expect("scale", attn_sdpa_forward(&d, vq, vk, vv, vo, NULL), ATTN_E_INVALID, "scale = inf", NULL, NULL);
    int64_t lens[2] = {8, 9};
    attn_sdpa_desc_init(&d, 2, 4, 8, 8, 32, 32), d.seqlens_k = lens;
    expect("seqlens_k", attn_sdpa_forward(&d, vq, vk, vv, vo, NULL), ATTN_E_SHAPE, "seqlens_k[1] = 9", "Sk = 8",
           NULL);
    float slopes[4] = {0.5f, 0.25f, INFINITY, 0.1f};
    attn_sdpa_desc_init(&d, 2, 4, 8, 8, 32, 32), d.alibi_slopes = slopes;
    expect("alibi", attn_sdpa_forward(&d, vq, vk, vv, vo, NULL), ATTN_E_INVALID, "alibi_slopes[2] = inf", NULL, NULL);
    int32_t cuq[3] = {0, 3, 7}, cuk[3] = {0, 4, 8};
    attn_sdpa_desc_init(&d, 1, 4, 8, 8, 32, 32), d.cu_seqlens_q = cuq, d.cu_seqlens_k = cuk, d.nseq = 2;
    expect("cu_seqlens", attn_sdpa_forward(&d, vq, vk, vv, vo, NULL), ATTN_E_SHAPE, "cu_seqlens_q", "Sq = 8", "7");
    attn_sdpa_desc_init(&d, 2, 4, 8, 8, 32, 32), d.causal = (attn_causal)5;
    expect("causal", attn_sdpa_forward(&d, vq, vk, vv, vo, NULL), ATTN_E_INVALID, "causal = 5", NULL, NULL);
    attn_sdpa_desc_init(&d, 2, 4, 8, 8, 32, 32);
    float lse[2 * 4 * 8];
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, lse));
    expect("no dk", attn_sdpa_backward(&d, vq, vk, vv, vo, vo, lse, vq, none, vv), ATTN_E_INVALID, "dk", NULL, NULL);
    /* a call that succeeds clears what the last refusal said */
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL));
    CHECK(!strcmp(attn_last_error(), ""), "a success leaves nothing said (\"%s\")", attn_last_error());
}

static void cache_mistakes(void) {
    attn_kv_cache_config c = {.batch = 2, .kv_heads = 2, .capacity = 6, .head_dim = 40, .dtype = ATTN_DTYPE_Q4_0};
    attn_kv_cache *kc = NULL;
    expect("q4_0 head size", attn_kv_cache_create(&c, &kc), ATTN_E_SHAPE, "head_dim = 40", "q4_0", "32");
    float bad = -1.0f;
    c.head_dim = 32, c.dtype = ATTN_DTYPE_FP8_E4M3, c.k_scale = &bad, c.k_scale_len = 1;
    expect("fp8 scale", attn_kv_cache_create(&c, &kc), ATTN_E_INVALID, "k_scale[0] = -1", "> 0", NULL);
    c.k_scale = NULL, c.dtype = ATTN_DTYPE_F32, c.batch = 0;
    expect("batch 0", attn_kv_cache_create(&c, &kc), ATTN_E_SHAPE, "batch = 0", NULL, NULL);
    c.batch = 2, c.capacity = (int64_t)1 << 31;
    expect("capacity 2^31", attn_kv_cache_create(&c, &kc), ATTN_E_SHAPE, "capacity = 2147483648", "2^31 - 1", NULL);
    c.capacity = 6;
    CHECK_OK(attn_kv_cache_create(&c, &kc));
    if (!kc) return;
    int64_t n[2] = {2, 7};
    attn_view kv = {k, 2 * 8 * 32, 8 * 32, 32};
    expect("past capacity", attn_kv_cache_append(kc, n, kv, kv), ATTN_E_CONTEXT, "n[1] = 7", "capacity of 6", NULL);
    n[1] = -1;
    expect("negative count", attn_kv_cache_append(kc, n, kv, kv), ATTN_E_SHAPE, "n[1] = -1", NULL, NULL);
    float row[32];
    expect("read head", attn_kv_cache_read(kc, 0, 5, 0, row, NULL), ATTN_E_INVALID, "hk = 5", "kv_heads = 2", NULL);
    expect("read token", attn_kv_cache_read(kc, 1, 0, 3, row, NULL), ATTN_E_SHAPE, "j = 3", "0 tokens", NULL);
    expect("fork", attn_kv_cache_fork(kc, 0, 4), ATTN_E_INVALID, "dst = 4", "batch = 2", NULL);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 2, 4, 1, 0, 32, 32), d.qkv_dtype = ATTN_DTYPE_BF16;
    attn_view vq = {q, 4 * 32, 32, 32}, vo = {o, 4 * 32, 32, 32};
    expect("bf16 queries", attn_kv_cache_attend(kc, &d, vq, vo, NULL), ATTN_E_UNSUPPORTED, "qkv_dtype = BF16",
           "the cache", NULL);
    attn_sdpa_desc_init(&d, 3, 4, 1, 0, 32, 32);
    expect("batch", attn_kv_cache_attend(kc, &d, vq, vo, NULL), ATTN_E_SHAPE, "B = 3", "batch = 2", NULL);
    attn_sdpa_desc_init(&d, 2, 4, 1, 0, 16, 32);
    expect("head size", attn_kv_cache_attend(kc, &d, vq, vo, NULL), ATTN_E_SHAPE, "D = 16", "D = 32", NULL);
    attn_kv_cache_free(kc);
}

static void page_mistakes(void) {
    /* 4 pages of 2 tokens, 1 kv head, D 32, NHD; sequences of 3 and 1 tokens */
    static float kp[4 * 2 * 32], vp[4 * 2 * 32];
    int32_t indptr[3] = {0, 2, 3}, indices[3] = {2, 0, 1}, last[2] = {1, 1};
    attn_paged_kv kv = {.dtype = ATTN_DTYPE_F32, .layout = ATTN_KV_NHD, .num_pages = 4, .page_size = 2, .Hkv = 1,
                        .D = 32, .Dv = 32, .k_pages = kp, .v_pages = vp, .kv_indptr = indptr, .kv_indices = indices,
                        .kv_last_page_len = last};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 2, 2, 1, 0, 32, 32);
    attn_view vq = {q, 2 * 32, 32, 32}, vo = {o, 2 * 32, 32, 32};
    CHECK_OK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL));
    indices[1] = 99;
    expect("page index", attn_paged_attention(&d, vq, &kv, NULL, vo, NULL), ATTN_E_INVALID, "kv_indices[1] = 99",
           "num_pages = 4", NULL);
    indices[1] = 0, last[0] = 3;
    expect("last page", attn_paged_attention(&d, vq, &kv, NULL, vo, NULL), ATTN_E_INVALID, "kv_last_page_len[0] = 3",
           "page_size", NULL);
    last[0] = 1, indptr[1] = 4;
    expect("indptr", attn_paged_attention(&d, vq, &kv, NULL, vo, NULL), ATTN_E_INVALID, "kv_indptr[2] = 3",
           "kv_indptr[1] = 4", NULL);
    indptr[1] = 2, d.D = 64;
    expect("head size", attn_paged_attention(&d, vq, &kv, NULL, vo, NULL), ATTN_E_SHAPE, "D = 64", "D = 32", NULL);
    d.D = 32;
    attn_paged_kv bad = kv;
    bad.dtype = ATTN_DTYPE_Q8_0, bad.D = 48, bad.Dv = 48, bad.v_dtype = ATTN_DTYPE_Q8_0;
    d.D = d.Dv = 48;
    expect("q8_0 rows", attn_paged_attention(&d, vq, &bad, NULL, vo, NULL), ATTN_E_SHAPE, "D = 48", "q8_0",
           "blocks of 32");
    d.D = d.Dv = 32;
    bad = kv, bad.dtype = ATTN_DTYPE_KV_INT8;
    expect("int8 pairs", attn_paged_attention(&d, vq, &bad, NULL, vo, NULL), ATTN_E_INVALID, "k_params is NULL",
           "int8", NULL);
    float sc[2] = {0.5f, NAN};
    bad = kv, bad.dtype = ATTN_DTYPE_FP8_E5M2, bad.v_dtype = ATTN_DTYPE_F32, bad.k_scale = sc, bad.k_scale_len = 2;
    expect("fp8 scales per head", attn_paged_attention(&d, vq, &bad, NULL, vo, NULL), ATTN_E_SHAPE, "k_scale_len = 2",
           "Hkv = 1", NULL);
    bad.Hkv = 2, bad.k_strides[0] = 2 * 2 * 32, bad.k_strides[1] = 64, bad.k_strides[2] = 32;
    d.Hkv = 2;
    expect("fp8 scale value", attn_paged_attention(&d, vq, &bad, NULL, vo, NULL), ATTN_E_INVALID, "k_scale[1] = nan",
           NULL, NULL);
    d.Hkv = 0;
    bad = kv, bad.layout = (attn_kv_layout)3;
    expect("layout", attn_paged_attention(&d, vq, &bad, NULL, vo, NULL), ATTN_E_INVALID, "layout = 3", "NHD", NULL);
    int32_t qo[3] = {0, 2, 1};
    expect("qo_indptr", attn_paged_attention(&d, vq, &kv, qo, vo, NULL), ATTN_E_INVALID, "qo_indptr[2] = 1",
           "qo_indptr[1] = 2", NULL);
    int64_t slots[3] = {0, -1, 1000};
    float rows[3 * 32] = {0};
    expect("slot", attn_paged_append(&kv, 3, rows, rows, slots), ATTN_E_INVALID, "slot_mapping[2] = 1000", "8 slots",
           NULL);
    expect("no slots", attn_paged_append(&kv, 3, rows, rows, NULL), ATTN_E_INVALID, "slot_mapping is NULL", NULL,
           NULL);
    float l1[1] = {0}, out1[1];
    expect("merge", attn_merge_states(-1, 1, out1, l1, out1, l1, out1, l1), ATTN_E_SHAPE, "n = -1", NULL, NULL);
}

static void file_mistakes(void) {
    attn_st_file *f = NULL;
    expect("no file", attn_st_open("no/such/file.safetensors", &f), ATTN_E_IO, "no/such/file.safetensors",
           "No such file", NULL);
    static const char junk[] = "\x02\x00\x00\x00\x00\x00\x00\x00[]";
    expect("not a header", attn_st_open_memory(junk, sizeof junk - 1, &f), ATTN_E_FORMAT, "header", NULL, NULL);
    attn_st_writer *w = NULL;
    CHECK_OK(attn_st_writer_new(&w));
    int64_t shape[2] = {2, 3};
    int64_t idx[6] = {0};
    CHECK_OK(attn_st_writer_add(w, "idx", ATTN_DTYPE_I64, 2, shape, idx));
    CHECK_OK(attn_st_writer_save(w, "errors.safetensors"));
    attn_st_writer_free(w);
    CHECK_OK(attn_st_open("errors.safetensors", &f));
    if (!f) return;
    float x[6];
    expect("missing tensor", attn_st_read_f32(f, "W_query", x, 6), ATTN_E_NOT_FOUND, "no tensor 'W_query'", NULL,
           NULL);
    expect("dtype", attn_st_read_f32(f, "idx", x, 6), ATTN_E_DTYPE, "tensor 'idx' is I64", "float", NULL);
    int64_t y[6];
    expect("count", attn_st_read_i64(f, "idx", y, 4), ATTN_E_SHAPE, "holds 6 values", "4 asked", NULL);
    /* a layer's loader says which tensor it missed */
    attn_layer_config cfg;
    attn_layer_config_default(&cfg, ATTN_LAYER_SA_V2, 3, 2, 1);
    attn_layer *l = NULL;
    expect("layer tensor", attn_layer_load(&cfg, f, &l), ATTN_E_NOT_FOUND, "missing tensor", "W_query", NULL);
    attn_st_close(f);
}

/* the layers', the optimizer's and the generator's refusals name what they refused */
static void layer_mistakes(void) {
    attn_layer_config cfg;
    attn_layer *l = NULL;
    attn_layer_config_default(&cfg, ATTN_LAYER_MHA, 8, 8, 3);
    cfg.context_length = 4;
    expect("heads divide d_out", attn_layer_create(&cfg, &l), ATTN_E_SHAPE, "d_out (8)", "heads (3)", NULL);
    attn_layer_config_default(&cfg, ATTN_LAYER_SA_V2, 8, 4, 1);
    cfg.dropout = 1.5;
    expect("dropout", attn_layer_create(&cfg, &l), ATTN_E_INVALID, "dropout = 1.5", "[0, 1]", NULL);
    cfg.dropout = 0.0, cfg.num_heads = 70000;
    expect("heads", attn_layer_create(&cfg, &l), ATTN_E_SHAPE, "num_heads = 70000", NULL, NULL);
    cfg.num_heads = 1, cfg.kind = (attn_layer_kind)42;
    expect("kind", attn_layer_create(&cfg, &l), ATTN_E_INVALID, "kind = 42", NULL, NULL);
    attn_layer_kind kind;
    expect("kind name", attn_layer_kind_parse("sa_v9", &kind), ATTN_E_INVALID, "\"sa_v9\"", NULL, NULL);
    attn_layer_config_default(&cfg, ATTN_LAYER_CAUSAL, 4, 4, 1);
    cfg.context_length = 6;
    CHECK_OK(attn_layer_create(&cfg, &l));
    if (!l) return;
    CHECK(!strcmp(attn_last_error(), ""), "a layer created leaves nothing said (\"%s\")", attn_last_error());
    float x[2 * 8 * 4] = {0}, out[2 * 8 * 4];
    attn_forward_args a = {.x = x, .B = 2, .S = 0, .out = out};
    expect("S 0", attn_layer_forward(l, &a), ATTN_E_SHAPE, "S = 0", NULL, NULL);
    a.S = 8;
    expect("context", attn_layer_forward(l, &a), ATTN_E_CONTEXT, "S = 8", "context_length = 6", NULL);
    a.S = 4, a.impl = (attn_impl)9;
    expect("impl", attn_layer_forward(l, &a), ATTN_E_INVALID, "impl = 9", NULL, NULL);
    a.impl = ATTN_IMPL_AUTO, a.y = x;
    attn_tensor_info info;
    expect("tensor index", attn_layer_tensor(l, 99, &info), ATTN_E_INVALID, "i = 99", NULL, NULL);
    float dout[2 * 4 * 4] = {0};
    attn_backward_args b = {.dout = dout};
    expect("backward first", attn_layer_backward(l, &b), ATTN_E_STATE, "attn_layer_forward", NULL, NULL);
    attn_kv_cache_config kc = {.batch = 2, .kv_heads = 1, .capacity = 16, .head_dim = 8, .v_head_dim = 8};
    attn_kv_cache *c = NULL;
    CHECK_OK(attn_kv_cache_create(&kc, &c));
    a.y = NULL;
    expect("cache shape", attn_layer_forward_incremental(l, c, &a), ATTN_E_SHAPE, "head_dim = 8", "heads of 4", NULL);
    attn_kv_cache_free(c);
    attn_layer_free(l);
    attn_optim_config oc;
    attn_optim *opt = NULL;
    attn_optim_config_default(&oc, ATTN_OPTIM_ADAMW);
    oc.beta2 = 1.0;
    expect("betas", attn_optim_create(&oc, &opt), ATTN_E_INVALID, "beta2 = 1", "[0, 1)", NULL);
    attn_optim_config_default(&oc, ATTN_OPTIM_SGD);
    oc.nesterov = 1;
    expect("nesterov", attn_optim_create(&oc, &opt), ATTN_E_INVALID, "nesterov", "momentum = 0", NULL);
    oc.nesterov = 0;
    CHECK_OK(attn_optim_create(&oc, &opt));
    if (opt) {
        float p[4] = {0}, g[4] = {0};
        CHECK_OK(attn_optim_add_param(opt, "w", p, g, 4));
        expect("same name", attn_optim_add_param(opt, "w", g, p, 4), ATTN_E_INVALID, "\"w\"", "already", NULL);
        attn_optim_free(opt);
    }
    attn_generator gen;
    attn_generator_seed(&gen, 1);
    float u[2];
    expect("uniform", attn_uniform(&gen, u, 2, 1.0, -1.0), ATTN_E_INVALID, "from = 1", "to = -1", NULL);
    attn_dropout dr;
    expect("dropout p", attn_dropout_begin(&gen, 2.0, 4, &dr), ATTN_E_INVALID, "p = 2", NULL, NULL);
    attn_st_writer *w = NULL;
    CHECK_OK(attn_st_writer_new(&w));
    int64_t sh[1] = {2};
    CHECK_OK(attn_st_writer_add(w, "t", ATTN_DTYPE_F32, 1, sh, u));
    expect("writer twice", attn_st_writer_add(w, "t", ATTN_DTYPE_F32, 1, sh, u), ATTN_E_INVALID, "'t' added twice",
           NULL, NULL);
    expect("writer path", attn_st_writer_save(w, "no/such/dir/x.safetensors"), ATTN_E_IO, "no/such/dir/x.safetensors",
           NULL, NULL);
    attn_st_writer_free(w);
}

/* the detail is the calling thread's: thread 1 succeeds, then thread 0 is
 * refused, then thread 1 still reads nothing and thread 0 its own line */
static void per_thread(void) {
    int other_empty = 0, own_named = 0, threads = 0;
#pragma omp parallel num_threads(2)
    {
        attn_sdpa_desc d;
        attn_view vq = {q, 4 * 8 * 32, 8 * 32, 32};
        float out[8 * 32];
        attn_view vo = {out, 8 * 32, 8 * 32, 32};
        int t = omp_get_thread_num();
#pragma omp single
        threads = omp_get_num_threads();
        if (t == 1) {
            attn_sdpa_desc_init(&d, 1, 1, 8, 8, 32, 32);
            CHECK_OK(attn_sdpa_forward(&d, vq, vq, vq, vo, NULL));
        }
#pragma omp barrier
        if (t == 0) {
            attn_sdpa_desc_init(&d, 2, 4, 8, 8, 0, 32);
            CHECK(attn_sdpa_forward(&d, vq, vq, vq, vq, NULL) == ATTN_E_SHAPE, "thread 0 refused");
        }
#pragma omp barrier
        if (t == 1) other_empty = attn_last_error()[0] == 0;
        if (t == 0) own_named = strstr(attn_last_error(), "D = 0") != NULL;
    }
    CHECK(own_named, "the refusing thread reads its own detail");
    CHECK(other_empty || threads < 2, "another thread reads nothing of it");
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    uint32_t s = 5;
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) q[i] = tu_frand(&s), k[i] = tu_frand(&s), v[i] = tu_frand(&s);
    sdpa_mistakes();
    cache_mistakes();
    page_mistakes();
    file_mistakes();
    layer_mistakes();
    per_thread();
    return tu_finish("test_errors");
}
