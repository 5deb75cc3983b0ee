/* Table-driven option parsing (opts.h). */
#include "opts.h"

#include "cli.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* index of choice s in "a|b|c", or -1 */
static int choice_index(const char *choices, const char *s) {
    size_t n = strlen(s);
    int i = 0;
    for (const char *p = choices; p; i++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, s, n)) return i;
        p = bar ? bar + 1 : NULL;
    }
    return -1;
}

/* "a, b or c" */
static void choice_list(const char *choices, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = 0;
    for (const char *p = choices; p && at < len;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        const char *sep = at == 0 ? "" : bar ? ", " : " or ";
        at += (size_t)snprintf(buf + at, len - at, "%s%.*s", sep, (int)l, p);
        p = bar ? bar + 1 : NULL;
    }
}

static void describe_value(const cli_opt *o, char *buf, size_t len) {
    switch (o->type) {
    case OPT_FLAG: snprintf(buf, len, "%s", ""); break;
    case OPT_STR: snprintf(buf, len, "%s", o->name ? "VALUE" : ""); break;
    case OPT_I64:
        if (o->hi >= 9e18)
            snprintf(buf, len, "N >= %.0f", o->lo);
        else
            snprintf(buf, len, "N in [%.0f, %.0f]", o->lo, o->hi);
        break;
    case OPT_F64:
        if (o->lo <= -1e30)
            snprintf(buf, len, "X");
        else
            snprintf(buf, len, "X in [%g, %g]", o->lo, o->hi);
        break;
    case OPT_PROB: snprintf(buf, len, "P in [0, 1]"); break;
    case OPT_CHOICE: snprintf(buf, len, "%s", o->choices); break;
    case OPT_FLAVOR: snprintf(buf, len, "mkl|nomkl"); break;
    }
}

void cli_print_help(const char *cmd, const char *usage, const cli_opt *opts, int n) {
    printf("usage: attn %s %s\n\noptions:\n", cmd, usage);
    for (int i = 0; i < n; i++) {
        char val[192], left[256];
        describe_value(&opts[i], val, sizeof val);
        snprintf(left, sizeof left, "%s%s%s", opts[i].name ? opts[i].name : "MODULE", *val ? " " : "", val);
        printf("  %-34s %s\n", left, opts[i].help);
    }
    printf("  %-34s %s\n", "--help", "this help");
}

/* the value v of option o into dst; prints the error and returns 0 */
static int set_value(const cli_opt *o, const char *v, void *dst) {
    char *at = (char *)dst + o->off, list[160];
    int64_t i;
    double x;
    char *end;
    switch (o->type) {
    case OPT_FLAG: *(int *)(void *)at = 1; return 1;
    case OPT_STR: *(const char **)(void *)at = v; return 1;
    case OPT_I64:
        if (!cli_parse_i64(v, (int64_t)o->lo, o->hi >= 9e18 ? INT64_MAX : (int64_t)o->hi, &i)) {
            if (o->hi >= 9e18)
                cli_error("%s must be an integer >= %.0f, got '%s'", o->name, o->lo, v);
            else
                cli_error("%s must be an integer in [%.0f, %.0f], got '%s'", o->name, o->lo, o->hi, v);
            return 0;
        }
        *(int64_t *)(void *)at = i;
        return 1;
    case OPT_F64:
        x = strtod(v, &end);
        if (!*v || *end || !isfinite(x) || x < o->lo || x > o->hi) {
            if (o->lo <= -1e30)
                cli_error("%s must be a finite number, got '%s'", o->name, v);
            else
                cli_error("%s must be a number in [%g, %g], got '%s'", o->name, o->lo, o->hi, v);
            return 0;
        }
        *(double *)(void *)at = x;
        return 1;
    case OPT_PROB:
        if (!cli_parse_prob(v, &x)) {
            cli_error("%s must be a probability in [0, 1], got '%s'", o->name, v);
            return 0;
        }
        *(double *)(void *)at = x;
        return 1;
    case OPT_CHOICE: {
        int k = choice_index(o->choices, v);
        if (k < 0) {
            choice_list(o->choices, list, sizeof list);
            cli_error("%s must be %s, got '%s'", o->name, list, v);
            return 0;
        }
        *(int *)(void *)at = o->values ? o->values[k] : k;
        return 1;
    }
    case OPT_FLAVOR:
        if (!cli_parse_flavor(v, (attn_torch_flavor *)(void *)at)) {
            cli_error("%s must be mkl or nomkl, got '%s'", o->name, v);
            return 0;
        }
        return 1;
    }
    return 0;
}

int cli_parse_opts(const char *cmd, const char *usage, const cli_opt *opts, int n, int argc, char **argv, void *dst) {
    int positional_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli_print_help(cmd, usage, opts, n);
            return -1;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const cli_opt *o = NULL;
        for (int k = 0; k < n && !o; k++)
            if (a[0] == '-' ? opts[k].name && !strcmp(opts[k].name, a) : !opts[k].name && !positional_done)
                o = &opts[k];
        if (!o) {
            if (a[0] == '-')
                cli_error("unknown option '%s' (attn %s --help lists them)", a, cmd);
            else
                cli_error("unexpected argument '%s'", a);
            return 0;
        }
        const char *v = a;
        if (!o->name) {
            positional_done = 1;
        } else if (o->type != OPT_FLAG) {
            if (i + 1 >= argc) {
                cli_error("option %s needs a value", a);
                return 0;
            }
            v = argv[++i];
        }
        if (!set_value(o, v, dst)) return 0;
        if (o->seen) *(int *)(void *)((char *)dst + o->seen - 1) = 1;
    }
    return 1;
}
