/* safetensors: round trip, dtype conversion, and the strict reader's
 * rejection of malformed files (every case must fail cleanly). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Build a file image: 8-byte length, header, data. */
static size_t image(unsigned char *buf, const char *header, const void *data, size_t dlen) {
    size_t h = strlen(header);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    if (dlen) memcpy(buf + 8 + h, data, dlen);
    return 8 + h + dlen;
}

static attn_status open_img(const char *header, const void *data, size_t dlen) {
    static unsigned char buf[4096];
    size_t n = image(buf, header, data, dlen);
    attn_st_file *f = NULL;
    attn_status st = attn_st_open_memory(buf, n, &f);
    CHECK((st == ATTN_OK) == (f != NULL), "handle set iff ok");
    attn_st_close(f);
    return st;
}

static void roundtrip(void) {
    attn_st_writer *w;
    CHECK_OK(attn_st_writer_new(&w));
    float a[6] = {1, -2, 3.5f, INFINITY, -0.0f, 1e-30f};
    uint8_t m[4] = {1, 0, 0, 1};
    int64_t sa[2] = {2, 3}, sm[2] = {2, 2}, s0[1] = {0};
    CHECK_OK(attn_st_writer_add(w, "a.weight", ATTN_DTYPE_F32, 2, sa, a));
    CHECK_OK(attn_st_writer_add(w, "mask", ATTN_DTYPE_BOOL, 2, sm, m));
    CHECK_OK(attn_st_writer_add(w, "empty", ATTN_DTYPE_F32, 1, s0, NULL));
    CHECK_OK(attn_st_writer_add(w, "scalar", ATTN_DTYPE_F32, 0, NULL, a));
    int32_t i32[3] = {0, -7, 2147483647};
    int64_t i64[2] = {INT64_MIN, 5}, si[1] = {3}, sl[1] = {2};
    CHECK_OK(attn_st_writer_add(w, "i32", ATTN_DTYPE_I32, 1, si, i32));
    CHECK_OK(attn_st_writer_add(w, "i64", ATTN_DTYPE_I64, 1, sl, i64));
    CHECK(attn_st_writer_add(w, "f16", ATTN_DTYPE_F16, 1, sl, i64) == ATTN_E_DTYPE, "F16 is not written");
    CHECK(attn_st_writer_add(w, "mask", ATTN_DTYPE_F32, 2, sa, a) == ATTN_E_INVALID, "duplicate name");
    CHECK(attn_st_writer_add(w, "__metadata__", ATTN_DTYPE_F32, 2, sa, a) == ATTN_E_INVALID, "reserved name");
    const char *path = "st_roundtrip.safetensors";
    CHECK_OK(attn_st_writer_save(w, path));
    attn_st_writer_free(w);
    attn_st_file *f = NULL;
    CHECK_OK(attn_st_open(path, &f));
    if (!f) return;
    CHECK(attn_st_count(f) == 6, "6 tensors, got %d", attn_st_count(f));
    attn_dtype dt;
    int nd;
    int64_t sh[ATTN_MAX_DIMS];
    CHECK_OK(attn_st_info(f, "a.weight", &dt, &nd, sh));
    CHECK(dt == ATTN_DTYPE_F32 && nd == 2 && sh[0] == 2 && sh[1] == 3, "a.weight info");
    float b[6];
    CHECK_OK(attn_st_read_f32(f, "a.weight", b, 6));
    CHECK(!memcmp(a, b, sizeof a), "F32 bits round trip");
    uint8_t m2[4];
    CHECK_OK(attn_st_read_u8(f, "mask", m2, 4));
    CHECK(!memcmp(m, m2, 4), "BOOL round trip");
    int64_t r[3];
    CHECK_OK(attn_st_read_i64(f, "i32", r, 3));
    CHECK(r[0] == 0 && r[1] == -7 && r[2] == 2147483647, "I32 round trip");
    CHECK_OK(attn_st_read_i64(f, "i64", r, 2));
    CHECK(r[0] == INT64_MIN && r[1] == 5, "I64 round trip");
    CHECK(attn_st_read_f32(f, "a.weight", b, 5) == ATTN_E_SHAPE, "wrong count");
    CHECK(attn_st_read_f32(f, "mask", b, 4) == ATTN_E_DTYPE, "BOOL read as float");
    CHECK(attn_st_read_u8(f, "a.weight", m2, 4) == ATTN_E_DTYPE, "F32 read as bytes");
    CHECK(attn_st_info(f, "nope", NULL, NULL, NULL) == ATTN_E_NOT_FOUND, "missing name");
    CHECK_OK(attn_st_info(f, "scalar", &dt, &nd, sh));
    CHECK(nd == 0, "0-d tensor");
    attn_st_close(f);
    /* a failed save never touches the existing file */
    CHECK(attn_st_writer_save(NULL, path) == ATTN_E_INVALID, "NULL writer");
    attn_st_writer *w2;
    CHECK_OK(attn_st_writer_new(&w2));
    CHECK(attn_st_writer_save(w2, "/nonexistent-dir/x.safetensors") == ATTN_E_IO, "unwritable path");
    attn_st_writer_free(w2);
    CHECK_OK(attn_st_open(path, &f));
    CHECK(f && attn_st_count(f) == 6, "existing file intact");
    attn_st_close(f);
    unlink(path);
}

static void conversions(void) {
    /* F16: 1.0 = 0x3c00, -2.5 = 0xc100, 65504 = 0x7bff, smallest subnormal 0x0001 */
    uint16_t h[4] = {0x3c00, 0xc100, 0x7bff, 0x0001};
    unsigned char buf[256];
    const char *hdr = "{\"t\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}";
    size_t n = image(buf, hdr, h, 8);
    attn_st_file *f = NULL;
    CHECK_OK(attn_st_open_memory(buf, n, &f));
    float o[4];
    if (f) {
        CHECK_OK(attn_st_read_f32(f, "t", o, 4));
        CHECK(o[0] == 1.0f && o[1] == -2.5f && o[2] == 65504.0f && o[3] == ldexpf(1.0f, -24), "F16 values");
        attn_st_close(f);
    }
    uint16_t bf[2] = {0x3f80, 0xc040}; /* 1.0, -3.0 */
    hdr = "{\"t\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}";
    n = image(buf, hdr, bf, 4);
    CHECK_OK(attn_st_open_memory(buf, n, &f));
    if (f) {
        CHECK_OK(attn_st_read_f32(f, "t", o, 2));
        CHECK(o[0] == 1.0f && o[1] == -3.0f, "BF16 values");
        attn_st_close(f);
    }
    double d[2] = {0.1, -1e300};
    hdr = "{\"t\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},\"__metadata__\":{\"format\":\"pt\"}}";
    n = image(buf, hdr, d, 16);
    CHECK_OK(attn_st_open_memory(buf, n, &f));
    if (f) {
        CHECK_OK(attn_st_read_f32(f, "t", o, 2));
        CHECK(o[0] == 0.1f && isinf(o[1]) && o[1] < 0, "F64 values");
        attn_st_close(f);
    }
}

static void malformed(void) {
    unsigned char d16[16] = {0};
    struct {
        const char *what, *hdr;
        size_t dlen;
    } bad[] = {
        {"not JSON", "{\"t\":", 4},
        {"not an object", "[1,2]", 0},
        {"trailing data", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8},
        {"gap at start", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8},
        {"overlap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12},
        {"offsets beyond data", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8},
        {"size mismatch", "{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8},
        {"begin > end", "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8},
        {"unknown dtype", "{\"t\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1},
        {"negative dim", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4},
        {"fractional dim", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4},
        {"huge dims overflow", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
         4},
        {"too many dims", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4},
        {"missing offsets", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4},
        {"three offsets", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,4]}}", 4},
        {"unknown key", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4},
        {"duplicate tensor",
         "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8},
        {"metadata not strings", "{\"__metadata__\":{\"a\":1}}", 0},
        {"empty name", "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
        {"garbage after JSON", "{}x", 0},
        {"dtype not a string", "{\"t\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        attn_status st = open_img(bad[i].hdr, d16, bad[i].dlen);
        CHECK(st != ATTN_OK, "malformed file accepted: %s", bad[i].what);
    }
    CHECK(open_img("{}      ", d16, 0) == ATTN_OK, "space padding after the JSON is allowed");
    CHECK(open_img("{\"t\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}", "\x01\x02", 2) == ATTN_OK,
          "BOOL with value 2 opens");
    unsigned char buf[128];
    attn_st_file *f = NULL;
    size_t n = image(buf, "{\"t\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}", "\x01\x02", 2);
    CHECK_OK(attn_st_open_memory(buf, n, &f));
    uint8_t m[2];
    CHECK(f && attn_st_read_u8(f, "t", m, 2) == ATTN_E_FORMAT, "BOOL value 2 rejected on read");
    attn_st_close(f);
    /* header length larger than the file, and a file shorter than 8 bytes */
    unsigned char hl[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    CHECK(attn_st_open_memory(hl, 10, &f) == ATTN_E_FORMAT, "header length beyond the file");
    CHECK(attn_st_open_memory(hl, 5, &f) == ATTN_E_FORMAT, "file shorter than 8 bytes");
    unsigned char nul[16] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '\0'};
    CHECK(attn_st_open_memory(nul, 10, &f) == ATTN_E_FORMAT, "NUL inside the header");
    CHECK(attn_st_open("/nonexistent/file.safetensors", &f) == ATTN_E_IO, "missing file");
    CHECK(attn_st_open(NULL, &f) == ATTN_E_INVALID, "NULL path");
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    roundtrip();
    conversions();
    malformed();
    return tu_finish("test_safetensors");
}
