/* attn train: a small model built from libattn's own layers learns to
 * reverse a random sequence.
 *
 * Task: a_1 .. a_n SEP a_n .. a_1 with a_i uniform over 10 digits. The model
 * reads the sequence left to right and predicts each next token; it is scored
 * on the n tokens after SEP, which it can only get right by attending back to
 * the mirrored position: a lookup by position that one causal attention
 * layer can learn, and no model without attention can do better than chance
 * (0.1).
 *
 * Model (all float32):
 *   h0 = tok_emb[x] + pos_emb            (B, T, C)
 *   h1 = h0 + causal_mha(h0)             libattn layer, H heads, with bias
 *   logits = head(h1)                    nn.Linear(C, V)
 *   loss = cross-entropy on the n positions after SEP
 * trained with libattn's AdamW; gradients from libattn's backward.
 * The last line printed is exactly "accuracy X" (held-out sequences). */
#include "cli.h"
#include "opts.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define VOCAB 11 /* digits 0-9 and SEP */
#define SEP 10

typedef struct model {
    int64_t n, T, C, H, V;
    float *tok, *pos, *head_w, *head_b;     /* parameters */
    float *gtok, *gpos, *ghead_w, *ghead_b; /* gradients */
    attn_layer *attn;
    /* activations (B*T rows) */
    int64_t B;
    float *h0, *a, *h1, *logits, *dlogits, *dh1, *dh0;
} model;

/* Sequences of length T + 1 = 2n + 1; inputs are the first T tokens. */
static void sample(attn_generator *g, int64_t B, int64_t n, int *seq) {
    int64_t L = 2 * n + 1;
    for (int64_t b = 0; b < B; b++) {
        int *s = seq + b * L;
        for (int64_t i = 0; i < n; i++) s[i] = (int)(attn_generator_next32(g) % 10u);
        s[n] = SEP;
        for (int64_t i = 0; i < n; i++) s[n + 1 + i] = s[n - 1 - i];
    }
}

static float *fz(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static attn_status model_init(model *m, int64_t n, int64_t C, int64_t H, int64_t Bmax, attn_generator *g) {
    memset(m, 0, sizeof *m);
    m->n = n, m->T = 2 * n, m->C = C, m->H = H, m->V = VOCAB, m->B = Bmax;
    size_t rows = (size_t)(Bmax * m->T);
    m->tok = fz((size_t)(m->V * C)), m->pos = fz((size_t)(m->T * C));
    m->head_w = fz((size_t)(m->V * C)), m->head_b = fz((size_t)m->V);
    m->gtok = fz((size_t)(m->V * C)), m->gpos = fz((size_t)(m->T * C));
    m->ghead_w = fz((size_t)(m->V * C)), m->ghead_b = fz((size_t)m->V);
    m->h0 = fz(rows * (size_t)C), m->a = fz(rows * (size_t)C), m->h1 = fz(rows * (size_t)C);
    m->dh1 = fz(rows * (size_t)C), m->dh0 = fz(rows * (size_t)C);
    m->logits = fz(rows * (size_t)m->V), m->dlogits = fz(rows * (size_t)m->V);
    if (!m->tok || !m->pos || !m->head_w || !m->head_b || !m->gtok || !m->gpos || !m->ghead_w || !m->ghead_b ||
        !m->h0 || !m->a || !m->h1 || !m->dh1 || !m->dh0 || !m->logits || !m->dlogits)
        return ATTN_E_NOMEM;
    attn_status st = attn_uniform(g, m->tok, (size_t)(m->V * C), -1.0, 1.0);
    if (!st) st = attn_uniform(g, m->pos, (size_t)(m->T * C), -1.0, 1.0);
    if (!st) st = attn_linear_init(g, m->head_w, m->head_b, C, m->V);
    attn_layer_config cfg;
    attn_layer_config_default(&cfg, ATTN_LAYER_CAUSAL_MHA, C, C, H);
    cfg.context_length = m->T;
    if (!st) st = attn_layer_create(&cfg, &m->attn);
    if (!st) st = attn_layer_init(m->attn, g);
    return st;
}

static void model_free(model *m) {
    float *p[] = {m->tok, m->pos, m->head_w, m->head_b, m->gtok,    m->gpos, m->ghead_w, m->ghead_b,
                  m->h0,  m->a,   m->h1,     m->logits, m->dlogits, m->dh1,  m->dh0};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    attn_layer_free(m->attn);
}

/* Forward on B sequences; returns the mean loss over scored positions and
 * counts correct predictions. With grad, also fills dlogits. */
static attn_status forward(model *m, const int *seq, int64_t B, double *loss, int64_t *correct, int grad) {
    int64_t T = m->T, C = m->C, V = m->V, L = T + 1, rows = B * T;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const float *te = m->tok + seq[b * L + t] * C, *pe = m->pos + t * C;
            float *h = m->h0 + (b * T + t) * C;
            for (int64_t c = 0; c < C; c++) h[c] = te[c] + pe[c];
        }
    attn_forward_args fa = {m->h0, B, T, NULL, 0, NULL, 0, NULL, ATTN_IMPL_AUTO, m->a, ATTN_MATH_STRICT};
    attn_status st = attn_layer_forward(m->attn, &fa);
    if (st) return st;
    for (int64_t i = 0; i < rows * C; i++) m->h1[i] = m->h0[i] + m->a[i];
    for (int64_t r = 0; r < rows; r++) memcpy(m->logits + r * V, m->head_b, (size_t)V * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)V, (int)C, 1.0f, m->h1, (int)C, m->head_w,
                (int)C, 1.0f, m->logits, (int)V);
    double tot = 0.0;
    int64_t ok = 0, scored = B * m->n;
    if (grad) memset(m->dlogits, 0, (size_t)(rows * V) * sizeof(float));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = m->n; t < T; t++) { /* inputs n..2n-1 predict the reversed half */
            const float *lg = m->logits + (b * T + t) * V;
            int target = seq[b * L + t + 1], best = 0;
            float mx = lg[0];
            for (int64_t v = 1; v < V; v++)
                if (lg[v] > mx) mx = lg[v], best = (int)v;
            double z = 0.0;
            for (int64_t v = 0; v < V; v++) z += exp((double)(lg[v] - mx));
            tot += log(z) - (double)(lg[target] - mx);
            ok += best == target;
            if (grad) {
                float *d = m->dlogits + (b * T + t) * V;
                for (int64_t v = 0; v < V; v++) d[v] = (float)(exp((double)(lg[v] - mx)) / z / (double)scored);
                d[target] -= 1.0f / (float)scored;
            }
        }
    *loss = tot / (double)scored;
    *correct = ok;
    return ATTN_OK;
}

static attn_status backward(model *m, const int *seq, int64_t B) {
    int64_t T = m->T, C = m->C, V = m->V, L = T + 1, rows = B * T;
    /* head: dW += dlogits^T h1, db += colsum, dh1 = dlogits W */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)V, (int)C, (int)rows, 1.0f, m->dlogits, (int)V, m->h1,
                (int)C, 1.0f, m->ghead_w, (int)C);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t v = 0; v < V; v++) m->ghead_b[v] += m->dlogits[r * V + v];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)C, (int)V, 1.0f, m->dlogits, (int)V,
                m->head_w, (int)C, 0.0f, m->dh1, (int)C);
    /* residual: dh0 = dh1 + attn backward(dh1) */
    attn_backward_args ba = {m->dh1, m->dh0, NULL};
    attn_status st = attn_layer_backward(m->attn, &ba);
    if (st) return st;
    for (int64_t i = 0; i < rows * C; i++) m->dh0[i] += m->dh1[i];
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const float *d = m->dh0 + (b * T + t) * C;
            float *gt = m->gtok + seq[b * L + t] * C, *gp = m->gpos + t * C;
            for (int64_t c = 0; c < C; c++) gt[c] += d[c], gp[c] += d[c];
        }
    return ATTN_OK;
}

static void zero_grads(model *m) {
    memset(m->gtok, 0, (size_t)(m->V * m->C) * sizeof(float));
    memset(m->gpos, 0, (size_t)(m->T * m->C) * sizeof(float));
    memset(m->ghead_w, 0, (size_t)(m->V * m->C) * sizeof(float));
    memset(m->ghead_b, 0, (size_t)m->V * sizeof(float));
    attn_layer_zero_grad(m->attn);
}

/* Accuracy on `count` held-out sequences, in batches of m->B. */
static attn_status evaluate(model *m, attn_generator *g, int64_t count, double *acc, double *loss) {
    int *seq = malloc((size_t)(m->B * (m->T + 1)) * sizeof(int));
    if (!seq) return ATTN_E_NOMEM;
    int64_t ok = 0, done = 0;
    double tl = 0.0;
    attn_status st = ATTN_OK;
    while (done < count && !st) {
        int64_t B = count - done < m->B ? count - done : m->B, c = 0;
        double l = 0.0;
        sample(g, B, m->n, seq);
        st = forward(m, seq, B, &l, &c, 0);
        ok += c;
        tl += l * (double)B;
        done += B;
    }
    free(seq);
    *acc = (double)ok / (double)(count * m->n);
    *loss = tl / (double)count;
    return st;
}

static attn_status save_model(const model *m, const char *path) {
    attn_st_writer *w;
    attn_status st = attn_st_writer_new(&w);
    int64_t st_tok[2] = {m->V, m->C}, st_pos[2] = {m->T, m->C}, st_hw[2] = {m->V, m->C}, st_hb[1] = {m->V};
    if (!st) st = attn_st_writer_add(w, "tok_emb.weight", ATTN_DTYPE_F32, 2, st_tok, m->tok);
    if (!st) st = attn_st_writer_add(w, "pos_emb.weight", ATTN_DTYPE_F32, 2, st_pos, m->pos);
    for (int i = 0; !st && i < attn_layer_tensor_count(m->attn); i++) {
        attn_tensor_info t;
        attn_layer_tensor(m->attn, i, &t);
        char name[128];
        snprintf(name, sizeof name, "attn.%s", t.name);
        st = attn_st_writer_add(w, name, ATTN_DTYPE_F32, t.ndim, t.shape, t.data);
    }
    if (!st) st = attn_st_writer_add(w, "head.weight", ATTN_DTYPE_F32, 2, st_hw, m->head_w);
    if (!st) st = attn_st_writer_add(w, "head.bias", ATTN_DTYPE_F32, 1, st_hb, m->head_b);
    if (!st) st = attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    return st;
}

typedef struct train_opts {
    int64_t steps, seed, n, C, H, B, threads;
    double lr;
    const char *save;
} train_opts;

#define O(f) offsetof(train_opts, f)
static const cli_opt train_table[] = {
    {"--steps", OPT_I64, O(steps), 0, 1, 1000000, NULL, NULL, "at most this many AdamW steps (default 4000)"},
    {"--seed", OPT_I64, O(seed), 0, 0, 9.3e18, NULL, NULL, "seeds init (seed), data (seed + 1, 2, 3)"},
    {"--length", OPT_I64, O(n), 0, 1, 64, NULL, NULL, "digits to reverse (default 8)"},
    {"--width", OPT_I64, O(C), 0, 1, 4096, NULL, NULL, "model width C (default 64)"},
    {"--heads", OPT_I64, O(H), 0, 1, 64, NULL, NULL, "attention heads (default 4)"},
    {"--batch", OPT_I64, O(B), 0, 1, 4096, NULL, NULL, "sequences per step (default 64)"},
    {"--lr", OPT_F64, O(lr), 0, 1e-12, 10, NULL, NULL, "AdamW learning rate (default 3e-3)"},
    {"--save", OPT_STR, O(save), 0, 0, 0, NULL, NULL, "write the trained weights (safetensors)"},
    {"--threads", OPT_I64, O(threads), 0, 1, 1024, NULL, NULL, "OpenMP and BLAS threads"},
};
#undef O

int cmd_train(int argc, char **argv) {
    train_opts o = {4000, 0, 8, 64, 4, 64, 0, 3e-3, NULL};
    int pr = cli_parse_opts("train", "[options]", train_table, (int)(sizeof train_table / sizeof train_table[0]), argc,
                            argv, &o);
    if (pr <= 0) return pr < 0 ? 0 : EXIT_USAGE;
    int64_t steps = o.steps, seed = o.seed, n = o.n, C = o.C, H = o.H, B = o.B, threads = o.threads, eval_every = 100;
    double lr = o.lr, target = 0.999;
    const char *save = o.save;
    if (C % H) {
        cli_error("--width %lld must be divisible by --heads %lld", (long long)C, (long long)H);
        return EXIT_USAGE;
    }
    if (threads > 0) cli_set_threads((int)threads);
    int tty = isatty(STDOUT_FILENO);
    attn_generator init_g, train_g, val_g, test_g;
    attn_generator_seed(&init_g, (uint64_t)seed);
    attn_generator_seed(&train_g, (uint64_t)seed + 1);
    attn_generator_seed(&val_g, (uint64_t)seed + 2);
    model m;
    attn_optim *opt = NULL;
    int *seq = malloc((size_t)(B * (2 * n + 1)) * sizeof(int));
    int rc = 1;
    attn_status st = model_init(&m, n, C, H, B, &init_g);
    attn_optim_config oc;
    attn_optim_config_default(&oc, ATTN_OPTIM_ADAMW);
    oc.lr = lr;
    if (!st) st = attn_optim_create(&oc, &opt);
    if (!st) st = attn_optim_add_param(opt, "tok_emb.weight", m.tok, m.gtok, (size_t)(m.V * C));
    if (!st) st = attn_optim_add_param(opt, "pos_emb.weight", m.pos, m.gpos, (size_t)(m.T * C));
    if (!st) st = attn_optim_add_layer(opt, m.attn, "attn.");
    if (!st) st = attn_optim_add_param(opt, "head.weight", m.head_w, m.ghead_w, (size_t)(m.V * C));
    if (!st) st = attn_optim_add_param(opt, "head.bias", m.head_b, m.ghead_b, (size_t)m.V);
    if (st || !seq) {
        cli_error("train: setup failed: %s", cli_status(st ? st : ATTN_E_NOMEM));
        goto done;
    }
    printf("reverse %lld digits after SEP; model: embeddings + causal_mha (C=%lld, H=%lld) + linear head; "
           "AdamW lr=%g, batch %lld\n",
           (long long)n, (long long)C, (long long)H, lr, (long long)B);
    fflush(stdout);
    double t0 = cli_now(), ema = 0.0;
    int64_t step;
    for (step = 1; step <= steps; step++) {
        double loss;
        int64_t correct;
        sample(&train_g, B, n, seq);
        zero_grads(&m);
        st = forward(&m, seq, B, &loss, &correct, 1);
        if (!st) st = backward(&m, seq, B);
        if (!st) st = attn_optim_step(opt);
        if (st) {
            cli_error("train: step %lld failed: %s", (long long)step, cli_status(st));
            goto done;
        }
        ema = step == 1 ? loss : 0.95 * ema + 0.05 * loss;
        if (step % eval_every == 0 || step == steps) {
            double acc, vloss;
            attn_generator vg = val_g; /* the same validation sequences every time */
            if ((st = evaluate(&m, &vg, 512, &acc, &vloss))) goto done;
            double el = cli_now() - t0;
            if (tty)
                printf("\rstep %5lld/%lld  loss %.4f  val acc %.4f  %.0f steps/s  %.1fs ", (long long)step,
                       (long long)steps, ema, acc, (double)step / el, el);
            else
                printf("step %lld/%lld loss %.4f val_acc %.4f steps/s %.0f time %.1fs\n", (long long)step,
                       (long long)steps, ema, acc, (double)step / el, el);
            fflush(stdout);
            if (acc >= target) break;
        }
    }
    if (tty) printf("\n");
    /* held-out test sequences: a generator stream never used for training */
    attn_generator_seed(&test_g, (uint64_t)seed + 3);
    double acc, tloss;
    if ((st = evaluate(&m, &test_g, 4096, &acc, &tloss))) {
        cli_error("train: evaluation failed: %s", cli_status(st));
        goto done;
    }
    printf("trained %lld steps in %.1fs; held-out loss %.4f on 4096 sequences\n",
           (long long)(step > steps ? steps : step), cli_now() - t0, tloss);
    if (save) {
        if ((st = save_model(&m, save))) {
            cli_error("cannot write '%s': %s", save, cli_status(st));
            goto done;
        }
        printf("saved weights to %s\n", save);
    }
    printf("accuracy %.4f\n", acc);
    rc = 0;
done:
    fflush(stdout);
    free(seq);
    attn_optim_free(opt);
    model_free(&m);
    return rc;
}
