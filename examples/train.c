/* Training a small attention layer with libattn's fused forward and backward
 * and its AdamW optimizer.
 *
 * A teacher (a causal multi-head attention layer, Warner's CausalAttention
 * with 4 heads, initialized from torch.manual_seed(1)) maps random token
 * vectors to targets; a student of the same shape, initialized from seed 2,
 * learns to reproduce them by minimizing the mean squared error. Each step:
 * forward (fused attention), the loss and its gradient, backward (fused),
 * optimizer step. The student reaches a loss below 2% of where it started.
 *
 * Build and run: make examples (or: cc train.c $(pkg-config --cflags --libs attn) -lm)
 * usage: train [--quick] */
#include <attn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 8, S = 32, C = 64, HEADS = 4 };

static attn_layer *make_layer(unsigned seed) {
    attn_layer_config cfg;
    attn_layer_config_default(&cfg, ATTN_LAYER_CAUSAL_MHA, C, C, HEADS);
    cfg.context_length = S;
    attn_layer *l = NULL;
    if (attn_layer_create(&cfg, &l) != ATTN_OK) return NULL;
    attn_generator g;
    attn_generator_seed(&g, seed); /* the parameters torch.manual_seed(seed) gives the PyTorch class */
    attn_layer_init(l, &g);
    return l;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    int steps = quick ? 150 : 600;
    attn_layer *teacher = make_layer(1), *student = make_layer(2);
    attn_optim_config oc;
    attn_optim_config_default(&oc, ATTN_OPTIM_ADAMW);
    oc.lr = 3e-3, oc.weight_decay = 0.0;
    attn_optim *opt = NULL;
    if (!teacher || !student || attn_optim_create(&oc, &opt) || attn_optim_add_layer(opt, student, "student."))
        return 1;
    static float x[B * S * C], target[B * S * C], out[B * S * C], dout[B * S * C];
    attn_generator data;
    attn_generator_seed(&data, 7);
    double first = 0, loss = 0;
    for (int step = 0; step < steps; step++) {
        /* a fresh batch each step: x ~ U(-1, 1), the teacher's answer as the target */
        attn_uniform(&data, x, B * S * C, -1.0, 1.0);
        attn_forward_args a = {.x = x, .B = B, .S = S, .out = target};
        if (attn_layer_forward(teacher, &a)) return 1;
        a.out = out;
        if (attn_layer_forward(student, &a)) return 1;
        loss = 0;
        for (int i = 0; i < B * S * C; i++) { /* mean squared error and its gradient */
            double e = (double)out[i] - target[i];
            loss += e * e;
            dout[i] = (float)(2.0 * e / (B * S * C));
        }
        loss /= B * S * C;
        if (step == 0) first = loss;
        attn_layer_zero_grad(student);
        attn_backward_args ba = {.dout = dout, .dx = NULL, .dy = NULL};
        if (attn_layer_backward(student, &ba) || attn_optim_step(opt)) return 1;
        if (step % (steps / 6) == 0 || step == steps - 1) printf("step %4d  loss %.6f\n", step, loss);
    }
    int ok = loss < 0.02 * first;
    printf("check: loss %.6f after %d steps = %.4f of the first (%.6f); wanted below 0.02: %s\n", loss, steps,
           loss / first, first, ok ? "ok" : "FAILED");
    attn_optim_free(opt), attn_layer_free(teacher), attn_layer_free(student);
    return !ok;
}
