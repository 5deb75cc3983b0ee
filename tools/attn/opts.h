/* Command-line options from a table: one row per option (name, type,
 * destination, bounds, help), so that a command's parser and its --help are
 * the same data and cannot disagree. */
#ifndef ATTN_TOOL_OPTS_H
#define ATTN_TOOL_OPTS_H

#include <stddef.h>

typedef enum cli_opt_type {
    OPT_FLAG,   /* no value: int destination set to 1 */
    OPT_STR,    /* const char * destination */
    OPT_I64,    /* int64_t destination, an integer in [lo, hi] */
    OPT_F64,    /* double destination, a finite number in [lo, hi] */
    OPT_PROB,   /* double destination, a probability in [0, 1] */
    OPT_CHOICE, /* int-sized destination (an enum): the value of the named choice */
    OPT_FLAVOR  /* attn_torch_flavor destination: mkl or nomkl */
} cli_opt_type;

typedef struct cli_opt {
    const char *name; /* "--input"; NULL: the positional argument (OPT_STR) */
    cli_opt_type type;
    size_t off;          /* offsetof the destination in the options struct */
    size_t seen;         /* CLI_SEEN(T, f): an int set to 1 when the option is given; 0: none */
    double lo, hi;       /* OPT_I64 / OPT_F64 bounds, inclusive */
    const char *choices; /* OPT_CHOICE: "a|b|c" */
    const int *values;   /* OPT_CHOICE: the value of each choice (NULL: 0, 1, 2, ...) */
    const char *help;
} cli_opt;

#define CLI_SEEN(T, f) (offsetof(T, f) + 1)

/* Parse argv[1..argc) into dst by the table (n rows). Returns 1 on success,
 * 0 after printing "attn: error: ..." for a bad command line, -1 after
 * printing the help (--help or -h anywhere). */
int cli_parse_opts(const char *cmd, const char *usage, const cli_opt *opts, int n, int argc, char **argv, void *dst);
/* The help of a table: "usage: attn CMD USAGE" and one line per option. */
void cli_print_help(const char *cmd, const char *usage, const cli_opt *opts, int n);

#endif
