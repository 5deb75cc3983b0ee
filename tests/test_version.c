/* Versions and the ABI (docs/API.md): the header, the library, CMake's
 * project version, pyproject.toml and CHANGELOG.md name one version; the
 * shared library's soname follows the rule (libattn.so.0.MINOR while the
 * major version is 0, libattn.so.MAJOR after); the Python package names the
 * same soname; attn_abi_compatible() holds for this build and fails when a
 * struct size or the version disagrees.
 * usage: test_version SRCDIR CMAKE_VERSION SONAME_FILE */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

/* the file's text contains needle */
static int has(const char *path, const char *needle) {
    char *t = tu_slurp(path, NULL);
    int ok = t && strstr(t, needle);
    free(t);
    return ok;
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    if (argc < 4) return 2;
    char want[64], path[1024], line[128];
    CHECK(!strcmp(attn_version(), ATTN_VERSION_STRING), "library %s, header %s", attn_version(), ATTN_VERSION_STRING);
    CHECK(attn_version_number() == ATTN_VERSION_NUMBER, "version number %d, header %d", attn_version_number(),
          ATTN_VERSION_NUMBER);
    snprintf(want, sizeof want, "%d.%d.%d", ATTN_VERSION_MAJOR, ATTN_VERSION_MINOR, ATTN_VERSION_PATCH);
    CHECK(!strcmp(want, ATTN_VERSION_STRING) && !strcmp(argv[2], ATTN_VERSION_STRING),
          "header parts %s, string %s, CMake %s", want, ATTN_VERSION_STRING, argv[2]);
    /* the soname rule */
    if (ATTN_VERSION_MAJOR == 0)
        snprintf(want, sizeof want, "libattn.so.0.%d", ATTN_VERSION_MINOR);
    else
        snprintf(want, sizeof want, "libattn.so.%d", ATTN_VERSION_MAJOR);
    CHECK(!strcmp(argv[3], want), "soname %s, the rule gives %s", argv[3], want);
    snprintf(line, sizeof line, "SONAME = \"%s\"", want);
    snprintf(path, sizeof path, "%s/../python/libattn/_capi.py", tu_srcdir);
    CHECK(has(path, line), "python/libattn/_capi.py says %s", line);
    snprintf(line, sizeof line, "version = \"%s\"", ATTN_VERSION_STRING);
    snprintf(path, sizeof path, "%s/../pyproject.toml", tu_srcdir);
    CHECK(has(path, line), "pyproject.toml says %s", line);
    /* CHANGELOG.md: the first release heading is this version */
    snprintf(path, sizeof path, "%s/../CHANGELOG.md", tu_srcdir);
    char *log = tu_slurp(path, NULL), *rel = log ? strstr(log, "\n## 0") : NULL;
    if (!rel && log) rel = strstr(log, "\n## 1");
    snprintf(line, sizeof line, "\n## %s ", ATTN_VERSION_STRING);
    CHECK(rel && !strncmp(rel, line, strlen(line)), "CHANGELOG.md's newest release is %s", ATTN_VERSION_STRING);
    free(log);
    /* the ABI check: holds here; a size or version that disagrees is caught
     * (what attn_abi_compatible compares, with one side changed) */
    CHECK(attn_abi_compatible() == 1, "attn_abi_compatible() on this build");
    CHECK(attn_abi_size("attn_sdpa_desc") == sizeof(attn_sdpa_desc) &&
              attn_abi_size("attn_optim_config") == sizeof(attn_optim_config),
          "attn_abi_size knows every public struct");
    CHECK(attn_abi_size("attn_sdpa_desc") != sizeof(attn_sdpa_desc) - sizeof(int64_t),
          "an older, smaller descriptor would be told apart");
    CHECK(attn_abi_size("no_such_struct") == 0 && attn_abi_size(NULL) == 0, "unknown names give 0");
    return tu_finish("test_version");
}
