#include <attn.h>
#include <stdio.h>

int main(void) {
    /* CausalAttention(d_in=3, d_out=2, context_length=6, dropout=0.0),
     * initialized as torch.manual_seed(123) would */
    attn_layer_config cfg;
    attn_layer_config_default(&cfg, ATTN_LAYER_CAUSAL, 3, 2, 1);
    cfg.context_length = 6;
    attn_layer *layer;
    attn_status st = attn_layer_create(&cfg, &layer);
    if (st != ATTN_OK) {
        fprintf(stderr, "%s\n", attn_status_string(st));
        return 1;
    }
    attn_generator gen;
    attn_generator_seed(&gen, 123);
    attn_layer_init(layer, &gen);

    float x[6 * 3] = {0.43f, 0.15f, 0.89f, 0.55f, 0.87f, 0.66f, 0.57f, 0.85f, 0.64f,
                      0.22f, 0.58f, 0.33f, 0.77f, 0.25f, 0.10f, 0.05f, 0.80f, 0.55f};
    float out[6 * 2];
    attn_forward_args a = {.x = x, .B = 1, .S = 6, .out = out};
    st = attn_layer_forward(layer, &a);
    printf("%s: %.4f %.4f\n", attn_status_string(st), out[0], out[1]); /* ok: -0.4519 0.2216 */
    attn_layer_free(layer);
    return st != ATTN_OK;
}
