/* Replays files (or every file of directories) through the fuzz entry point.
 * usage: test_fuzz_corpus PATH... */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = buf && n > 0 ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    LLVMFuzzerTestOneInput(buf, got);
    /* every prefix of a short input too: truncations are the classic bugs */
    for (size_t cut = 0; cut < got && got <= 4096; cut += 1 + got / 64) LLVMFuzzerTestOneInput(buf, cut);
    free(buf);
    return 1;
}

int main(int argc, char **argv) {
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) continue;
        if (!S_ISDIR(st.st_mode)) {
            files += replay_file(argv[i]);
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            files += replay_file(p);
        }
        if (d) closedir(d);
    }
    printf("replayed %d files: %d passed, 0 failed\n", files, files);
    return files > 0 ? 0 : 1;
}
