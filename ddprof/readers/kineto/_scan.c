/* Columns of a run of Kineto events straight from its JSON text (see scan.py, which uses it).
 *
 * A run is the text "[ev, ev, ...]" that stream.split cuts. Scanner.scan reads it once, without making a
 * Python object per event, into the columns of its complete ('X') events: timestamps and durations,
 * six integer columns, the CRC-32 of the input shapes and types, names and categories as codes into the
 * file's tables of distinct strings; and the byte spans of the few events the caller decodes itself (the
 * instants and begin/end events, and the complete events that may carry collective metadata).
 *
 * It takes a run only where the typed decoder (structs.STRICT_RUN) would take it and give the same
 * values: anything else, from a malformed number to an escaped name, a float where an integer is typed
 * or a run that is not whole events (a bad cut), makes scan return None, having changed nothing, and the
 * run is decoded the ordinary way (which also says what is wrong with it). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h> /* 16 bytes at a time through whitespace and strings (every x86-64 has SSE2) */
#endif

#define MAX_DEPTH 64 /* deeper values are left to the ordinary path */
#define NULL_INT INT64_MIN

/* ---- growable byte buffers ---------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_grow(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (!data) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n) {
    if (n == 0) return 0; /* an empty name: nothing to copy (and no buffer yet to copy into) */
    if (buf_grow(b, n)) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static void buf_free(Buf *b) {
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- CRC-32 (zlib's polynomial and conventions: crc32(data, start)) --------------------------------- */

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32_of(const unsigned char *p, size_t n, uint32_t start) {
    uint32_t c = ~start;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return ~c;
}

/* ---- a table of distinct strings, each with a code (its index) ------------------------------------- */

typedef struct {
    uint64_t *hashes; /* by slot; 0: empty */
    int32_t *codes;   /* by slot */
    size_t mask;
    Buf keys;   /* the strings, one after the other */
    Buf spans;  /* by code: uint64 offset << 32 | length... kept as two uint32 */
    uint32_t n; /* codes given */
} Table;

static uint64_t hash_of(const unsigned char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return h | 1; /* never 0 */
}

static const unsigned char *table_key(const Table *t, uint32_t code, uint32_t *len) {
    const uint32_t *sp = (const uint32_t *)t->spans.data + 2 * (size_t)code;
    *len = sp[1];
    return t->keys.data ? (const unsigned char *)t->keys.data + sp[0] : (const unsigned char *)""; /* only "" so far */
}

static int table_resize(Table *t, size_t slots) {
    uint64_t *hashes = PyMem_Calloc(slots, sizeof(uint64_t));
    int32_t *codes = PyMem_Malloc(slots * sizeof(int32_t));
    if (!hashes || !codes) {
        PyMem_Free(hashes);
        PyMem_Free(codes);
        return -1;
    }
    for (uint32_t c = 0; c < t->n; c++) {
        uint32_t len;
        const unsigned char *k = table_key(t, c, &len);
        uint64_t h = hash_of(k, len);
        size_t i = h & (slots - 1);
        while (hashes[i]) i = (i + 1) & (slots - 1);
        hashes[i] = h;
        codes[i] = (int32_t)c;
    }
    PyMem_Free(t->hashes);
    PyMem_Free(t->codes);
    t->hashes = hashes;
    t->codes = codes;
    t->mask = slots - 1;
    return 0;
}

/* The code of the string p[0:n], added at the end when new; -1 on memory error. */
static int64_t table_code(Table *t, const unsigned char *p, size_t n) {
    uint64_t h = hash_of(p, n);
    size_t i = h & t->mask;
    while (t->hashes[i]) {
        if (t->hashes[i] == h) {
            uint32_t len;
            const unsigned char *k = table_key(t, (uint32_t)t->codes[i], &len);
            if (len == n && (n == 0 || memcmp(k, p, n) == 0)) return t->codes[i];
        }
        i = (i + 1) & t->mask;
    }
    if (t->keys.len + n > UINT32_MAX || t->n >= INT32_MAX) return -1;
    uint32_t span[2] = {(uint32_t)t->keys.len, (uint32_t)n};
    if (buf_put(&t->keys, p, n) || buf_put(&t->spans, span, sizeof span)) return -1;
    t->hashes[i] = h;
    t->codes[i] = (int32_t)t->n;
    t->n++;
    if ((size_t)t->n * 2 > t->mask + 1 && table_resize(t, (t->mask + 1) * 2)) return -1;
    return t->n - 1;
}

/* Forget the codes from n on (a run not taken). */
static int table_truncate(Table *t, uint32_t n) {
    if (n == t->n) return 0;
    const uint32_t *sp = (const uint32_t *)t->spans.data + 2 * (size_t)n;
    t->keys.len = sp[0];
    t->spans.len = 2 * sizeof(uint32_t) * (size_t)n;
    t->n = n;
    return table_resize(t, t->mask + 1);
}

static void table_free(Table *t) {
    PyMem_Free(t->hashes);
    PyMem_Free(t->codes);
    buf_free(&t->keys);
    buf_free(&t->spans);
}

/* ---- the scanner's state ------------------------------------------------------------------------------ */

enum { N_INTS = 6 }; /* pid, tid, stream, device, correlation, external id */

typedef struct {
    PyObject_HEAD
    Table names, cats, icats; /* icats: the instants' categories (whether each has a kind: the caller's) */
    int64_t null_cat, null_icat; /* the code of a missing category, -1 until one is seen */
    double max_ts_us, max_dur_us;
} Scanner;

/* One run's output. */
typedef struct {
    Buf ts, dur, ints[N_INTS], shapes, name, cat, coll, marked, spans, timed, spelled;
    uint32_t n, nulls;
} Out;

static void out_free(Out *o) {
    buf_free(&o->ts);
    buf_free(&o->dur);
    for (int i = 0; i < N_INTS; i++) buf_free(&o->ints[i]);
    buf_free(&o->shapes);
    buf_free(&o->name);
    buf_free(&o->cat);
    buf_free(&o->coll);
    buf_free(&o->marked);
    buf_free(&o->spans);
    buf_free(&o->timed);
    buf_free(&o->spelled);
}

/* ---- JSON scanning ------------------------------------------------------------------------------------ */

typedef struct {
    const unsigned char *p, *end;
} Cur;

/* Why a scan stops: DECLINE (the run is the ordinary path's), NOMEM (a Python error is set). */
enum { OK = 0, DECLINE = 1, NOMEM = 2 };

static inline int is_ws(unsigned char ch) { return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t'; }

static inline void skip_ws(Cur *c) {
    const unsigned char *p = c->p, *end = c->end;
    if (p < end && !is_ws(*p)) return;
#if defined(__SSE2__)
    const __m128i sp = _mm_set1_epi8(' '), nl = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r'), tab = _mm_set1_epi8('\t');
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, sp), _mm_cmpeq_epi8(v, nl)),
                                  _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, tab)));
        unsigned other = ~(unsigned)_mm_movemask_epi8(ws) & 0xFFFF;
        if (other) {
            c->p = p + __builtin_ctz(other);
            return;
        }
        p += 16;
    }
#endif
    while (p < end && is_ws(*p)) p++;
    c->p = p;
}

static inline int hexval(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A string at c->p (its opening quote): its contents' span and whether it holds an escape. Strict UTF-8
 * and escapes are checked; an escaped surrogate is not taken (the ordinary path says what it makes of it). */
static int scan_string(Cur *c, const unsigned char **s, size_t *n, int *escaped) {
    const unsigned char *p = c->p + 1, *end = c->end;
    *escaped = 0;
    *s = p;
    for (;;) {
#if defined(__SSE2__)
        const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
        while (end - p >= 16) { /* to the first quote, backslash, control byte or byte >= 0x80 (signed < 0x20) */
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)),
                                        _mm_cmplt_epi8(v, space));
            unsigned m = (unsigned)_mm_movemask_epi8(stop);
            if (m) {
                p += __builtin_ctz(m);
                break;
            }
            p += 16;
        }
#endif
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
        if (p >= end) return DECLINE;
        unsigned char ch = *p;
        if (ch == '"') break;
        if (ch < 0x20) return DECLINE;
        if (ch == '\\') {
            *escaped = 1;
            if (p + 1 >= end) return DECLINE;
            unsigned char e = p[1];
            if (e == 'u') {
                if (p + 6 > end) return DECLINE;
                int v = 0;
                for (int k = 2; k < 6; k++) {
                    int h = hexval(p[k]);
                    if (h < 0) return DECLINE;
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return DECLINE;
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
            } else {
                return DECLINE;
            }
            continue;
        }
        /* a multi-byte UTF-8 sequence, checked as Python's strict decoder checks it */
        int more;
        uint32_t cp;
        if (ch >= 0xC2 && ch <= 0xDF) { more = 1; cp = ch & 0x1F; }
        else if (ch >= 0xE0 && ch <= 0xEF) { more = 2; cp = ch & 0x0F; }
        else if (ch >= 0xF0 && ch <= 0xF4) { more = 3; cp = ch & 0x07; }
        else return DECLINE;
        if (p + more >= end) return DECLINE;
        for (int k = 1; k <= more; k++) {
            if ((p[k] & 0xC0) != 0x80) return DECLINE;
            cp = cp << 6 | (p[k] & 0x3F);
        }
        if ((more == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (more == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return DECLINE;
        p += more + 1;
    }
    *n = (size_t)(p - *s);
    c->p = p + 1;
    return OK;
}

/* A number at c->p, checked against JSON's grammar: its span, and whether it is an integer. */
static int scan_number(Cur *c, const unsigned char **s, size_t *n, int *integer) {
    const unsigned char *p = c->p, *end = c->end;
    *s = p;
    *integer = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) return DECLINE;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return DECLINE;
    }
    if (p < end && *p == '.') {
        *integer = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return DECLINE;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *integer = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return DECLINE;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p >= end) return DECLINE; /* a value is always followed by something in a run */
    *n = (size_t)(p - *s);
    c->p = p;
    return OK;
}

static int scan_literal(Cur *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) <= n || memcmp(c->p, word, n) != 0) return DECLINE;
    c->p += n;
    return OK;
}

/* An object member's key and the colon after it, the value's first byte next (DECLINE for an escaped key
 * where ``plain_key``: it may spell a field's name, which the ordinary path reads). */
static int scan_key(Cur *c, const unsigned char **k, size_t *n, int plain_key) {
    int esc, r;
    skip_ws(c);
    if (c->p >= c->end || *c->p != '"') return DECLINE;
    if ((r = scan_string(c, k, n, &esc))) return r;
    if (esc && plain_key) return DECLINE;
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return DECLINE;
    c->p++;
    skip_ws(c);
    return c->p < c->end ? OK : DECLINE;
}

/* What follows an item of a container: 1 for a comma (another item), 0 for ``close`` (passed), -1 else. */
static int next_item(Cur *c, unsigned char close) {
    skip_ws(c);
    if (c->p < c->end) {
        if (*c->p == ',') {
            c->p++;
            return 1;
        }
        if (*c->p == close) {
            c->p++;
            return 0;
        }
    }
    return -1;
}

/* Any value, checked and passed over. */
static int skip_value(Cur *c, int depth) {
    const unsigned char *s;
    size_t n;
    int flag, r;
    if (c->p >= c->end) return DECLINE;
    switch (*c->p) {
    case '"':
        return scan_string(c, &s, &n, &flag);
    case 't':
        return scan_literal(c, "true", 4);
    case 'f':
        return scan_literal(c, "false", 5);
    case 'n':
        return scan_literal(c, "null", 4);
    case '[':
    case '{': {
        int object = *c->p == '{';
        unsigned char close = object ? '}' : ']';
        if (depth >= MAX_DEPTH) return DECLINE;
        c->p++;
        skip_ws(c);
        if (c->p < c->end && *c->p == close) {
            c->p++;
            return OK;
        }
        for (;;) {
            skip_ws(c);
            if (object && (r = scan_key(c, &s, &n, 0))) return r;
            if ((r = skip_value(c, depth + 1))) return r;
            int more = next_item(c, close);
            if (more < 0) return DECLINE;
            if (!more) return OK;
        }
    }
    default:
        return scan_number(c, &s, &n, &flag);
    }
}

/* How a typed field was written. */
enum { ABSENT = 0, NUL, INT, BIG, FLOAT, STR, BAD };

/* An integer of int64's range from its checked text (BIG beyond it). */
static int int_of(const unsigned char *s, size_t n, int64_t *v) {
    int neg = *s == '-';
    uint64_t u = 0;
    for (size_t i = neg; i < n; i++) {
        unsigned d = s[i] - '0';
        if (u > (UINT64_MAX - d) / 10) return BIG;
        u = u * 10 + d;
    }
    if (neg) {
        if (u > (uint64_t)INT64_MAX + 1) return BIG;
        *v = u == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)u;
    } else {
        if (u > (uint64_t)INT64_MAX) return BIG;
        *v = (int64_t)u;
    }
    return INT;
}

/* A field typed ``int | None`` by the strict decoder, ``int | float | str | None`` by the lenient one
 * (structs.Num): its kind; a string is taken (STR: the caller reads its integer), a float is not (BAD). */
static int int_field(Cur *c, int64_t *v, int *r) {
    const unsigned char *s;
    size_t n;
    int integer;
    unsigned char ch = *c->p;
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        if ((*r = scan_number(c, &s, &n, &integer))) return BAD;
        return integer ? int_of(s, n, v) : BAD;
    }
    if (ch == '"') {
        *r = scan_string(c, &s, &n, &integer);
        return STR;
    }
    if (ch == 'n') {
        *r = scan_literal(c, "null", 4);
        return NUL;
    }
    *r = skip_value(c, 1);
    return BAD;
}

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The double nearest a checked decimal number with at most 19 significant digits, where it is exact to
 * compute (its digits below 2^53 and a power of ten up to 1e22: one correctly rounded operation); 0 where
 * the caller must parse it. */
static int fast_double(const unsigned char *s, size_t n, double *v) {
    const unsigned char *p = s, *end = s + n;
    int neg = *p == '-';
    p += neg;
    uint64_t m = 0;
    int digits = 0, e10 = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        if (digits || *p != '0') digits++;
        m = m * 10 + (unsigned)(*p - '0');
        if (digits > 19) return 0;
    }
    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9'; p++) {
            if (digits || *p != '0') digits++;
            m = m * 10 + (unsigned)(*p - '0');
            e10--;
            if (digits > 19) return 0;
        }
    }
    if (p != end) return 0; /* an exponent: the slow path */
    while (m && m % 10 == 0 && e10 < 0) { /* 1700000001000000.000 is 1700000001000000 */
        m /= 10;
        e10++;
    }
    if (m > (1ull << 53) || e10 < -22) return 0;
    double d = (double)m;
    d = e10 < 0 ? d / POW10[-e10] : d;
    *v = neg ? -d : d;
    return 1;
}

/* A field typed ``float | None``: its value as the typed decoder gives it (an integer's nearest double). */
static int float_field(Cur *c, double *v, int *r) {
    const unsigned char *s;
    size_t n;
    int integer;
    unsigned char ch = *c->p;
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        if ((*r = scan_number(c, &s, &n, &integer))) return BAD;
        if (integer && n <= 18) {
            int64_t i;
            int_of(s, n, &i);
            *v = (double)i;
            return FLOAT;
        }
        if (fast_double(s, n, v)) return FLOAT;
        char text[64];
        if (n >= sizeof text) { *r = DECLINE; return BAD; }
        memcpy(text, s, n);
        text[n] = 0;
        char *stop;
        *v = PyOS_string_to_double(text, &stop, NULL);
        if (*v == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            *r = DECLINE;
            return BAD;
        }
        if (stop != text + n || !isfinite(*v)) { *r = DECLINE; return BAD; }
        if (*v == 0.0 || fabs(*v) < 2.2250738585072014e-308) {
            /* zero or subnormal: what an underflow gives is left to the ordinary path */
            for (size_t k = 0; k < n && s[k] != 'e' && s[k] != 'E'; k++)
                if (s[k] >= '1' && s[k] <= '9') { *r = DECLINE; return BAD; }
        }
        return FLOAT;
    }
    if (ch == 'n') {
        *r = scan_literal(c, "null", 4);
        return NUL;
    }
    *r = skip_value(c, 1);
    return BAD;
}

/* A field typed ``str | None`` (``str | int | None`` where ``ints``). */
static int str_field(Cur *c, const unsigned char **s, size_t *n, int *escaped, int ints, int *r) {
    unsigned char ch = *c->p;
    if (ch == '"') {
        *r = scan_string(c, s, n, escaped);
        return STR;
    }
    if (ch == 'n') {
        *r = scan_literal(c, "null", 4);
        return NUL;
    }
    if (ints && (ch == '-' || (ch >= '0' && ch <= '9'))) {
        int integer;
        if ((*r = scan_number(c, s, n, &integer))) return BAD;
        return integer ? INT : BAD;
    }
    *r = skip_value(c, 1);
    return BAD;
}

/* What one event holds of what is kept. */
typedef struct {
    int ph; /* 0: none, 'X', 'T' (an instant or begin/end), 'O' (another phase) */
    int instant; /* 'i' or 'I' */
    int bad; /* a field of another type than the typed decoder's */
    int name_k, cat_k, ts_k, dur_k;
    const unsigned char *name, *cat;
    size_t name_n, cat_n;
    int name_esc, cat_esc;
    double ts, dur;
    int ints_k[N_INTS];
    int64_t ints[N_INTS];
    int coll; /* a collective name (not null) */
    const unsigned char *dims, *types;
    size_t dims_n, types_n;
} Event;

enum { A_INT, A_COL, A_STR, A_STRINT, A_RAW };
typedef struct {
    const char *key;
    size_t n;
    int type;
    int slot; /* A_COL: the column; A_STR: 1 for the collective name; A_RAW: 1 dims, 2 types */
} ArgKey;

/* The args' fields of structs._args, by their keys in the trace. */
static const ArgKey ARG_KEYS[] = {
    {"External id", 11, A_COL, 5},
    {"correlation", 11, A_COL, 4},
    {"stream", 6, A_COL, 2},
    {"device", 6, A_COL, 3},
    {"Collective name", 15, A_STR, 1},
    {"In msg nelems", 13, A_INT, 0},
    {"Out msg nelems", 14, A_INT, 0},
    {"Group size", 10, A_INT, 0},
    {"dtype", 5, A_STR, 0},
    {"Process Group Name", 18, A_STRINT, 0},
    {"Process Group ID", 16, A_STRINT, 0},
    {"Seq", 3, A_INT, 0},
    {"Src Rank", 8, A_INT, 0},
    {"Dst Rank", 8, A_INT, 0},
    {"Input Dims", 10, A_RAW, 1},
    {"Input type", 10, A_RAW, 2},
    {"Concrete Inputs", 15, A_RAW, 0},
    {"In split size", 13, A_RAW, 0},
    {"Out split size", 14, A_RAW, 0},
};
#define N_ARG_KEYS (sizeof ARG_KEYS / sizeof ARG_KEYS[0])

static void reset_args(Event *e) {
    for (int i = 2; i < N_INTS; i++) e->ints_k[i] = ABSENT;
    e->coll = 0;
    e->dims = e->types = NULL;
    e->dims_n = e->types_n = 0;
}

static int scan_args(Cur *c, Event *e) {
    int r;
    c->p++; /* '{' */
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return OK;
    }
    for (;;) {
        const unsigned char *k, *s;
        size_t kn, n;
        int esc;
        if ((r = scan_key(c, &k, &kn, 1))) return r;
        const ArgKey *a = NULL;
        for (size_t i = 0; i < N_ARG_KEYS; i++) {
            if (ARG_KEYS[i].n == kn && memcmp(ARG_KEYS[i].key, k, kn) == 0) {
                a = &ARG_KEYS[i];
                break;
            }
        }
        if (!a) {
            if ((r = skip_value(c, 2))) return r;
        } else if (a->type == A_COL || a->type == A_INT) {
            int64_t v = 0;
            int kind = int_field(c, &v, &r);
            if (r) return r;
            if (kind == BAD) e->bad = 1;
            if (a->type == A_COL) {
                e->ints_k[a->slot] = kind;
                e->ints[a->slot] = v;
            }
        } else if (a->type == A_STR || a->type == A_STRINT) {
            int kind = str_field(c, &s, &n, &esc, a->type == A_STRINT, &r);
            if (r) return r;
            if (kind == BAD) e->bad = 1;
            if (a->slot == 1) e->coll = kind == STR;
        } else {
            const unsigned char *start = c->p;
            if ((r = skip_value(c, 2))) return r;
            if (a->slot == 1) { e->dims = start; e->dims_n = (size_t)(c->p - start); }
            if (a->slot == 2) { e->types = start; e->types_n = (size_t)(c->p - start); }
        }
        int more = next_item(c, '}');
        if (more < 0) return DECLINE;
        if (!more) return OK;
    }
}

static const char OTHER_PHASES[] = "bneCsftPNODMVvRc()";

static int scan_event(Cur *c, Event *e) {
    int r;
    memset(e, 0, sizeof *e);
    c->p++; /* '{' */
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return DECLINE; /* no phase */
    }
    for (;;) {
        const unsigned char *k, *s;
        size_t kn, n;
        int esc;
        if ((r = scan_key(c, &k, &kn, 1))) return r;
        int kind;
        if (kn == 2 && k[0] == 'p' && k[1] == 'h') {
            if (e->ph || *c->p != '"') return DECLINE;
            if ((r = scan_string(c, &s, &n, &esc))) return r;
            if (esc || n != 1) return DECLINE;
            if (*s == 'X') e->ph = 'X';
            else if (*s == 'B' || *s == 'E' || *s == 'i' || *s == 'I') {
                e->ph = 'T';
                e->instant = *s == 'i' || *s == 'I';
            }
            else if (memchr(OTHER_PHASES, *s, sizeof OTHER_PHASES - 1)) e->ph = 'O';
            else return DECLINE;
        } else if (kn == 4 && memcmp(k, "name", 4) == 0) {
            kind = str_field(c, &e->name, &e->name_n, &e->name_esc, 0, &r);
            if (r) return r;
            e->name_k = kind;
        } else if (kn == 3 && memcmp(k, "cat", 3) == 0) {
            kind = str_field(c, &e->cat, &e->cat_n, &e->cat_esc, 0, &r);
            if (r) return r;
            e->cat_k = kind;
        } else if (kn == 3 && (memcmp(k, "pid", 3) == 0 || memcmp(k, "tid", 3) == 0)) {
            int slot = k[0] == 't';
            e->ints_k[slot] = int_field(c, &e->ints[slot], &r);
            if (r) return r;
        } else if (kn == 2 && k[0] == 't' && k[1] == 's') {
            e->ts_k = float_field(c, &e->ts, &r);
            if (r) return r;
        } else if (kn == 3 && memcmp(k, "dur", 3) == 0) {
            e->dur_k = float_field(c, &e->dur, &r);
            if (r) return r;
        } else if (kn == 4 && memcmp(k, "args", 4) == 0) {
            reset_args(e);
            if (*c->p == '{') {
                if ((r = scan_args(c, e))) return r;
            } else if (*c->p == 'n') {
                if ((r = scan_literal(c, "null", 4))) return r;
            } else {
                if ((r = skip_value(c, 1))) return r;
                e->bad = 1;
            }
        } else {
            if ((r = skip_value(c, 1))) return r;
        }
        int more = next_item(c, '}');
        if (more < 0) return DECLINE;
        if (!more) break;
    }
    if (!e->ph) return DECLINE;
    if (e->ph == 'O') return OK; /* its fields are not typed: whatever they hold */
    if (e->bad || e->name_k == BAD || e->cat_k == BAD || e->ts_k == BAD || e->dur_k == BAD) return DECLINE;
    for (int i = 0; i < N_INTS; i++)
        if (e->ints_k[i] == BAD) return DECLINE;
    return OK;
}

/* The code of an event's category in ``t`` (a missing one has a code of its own: ``*null_code``). */
static int64_t cat_code(Table *t, int64_t *null_code, const Event *e) {
    if (e->cat_k == STR) return table_code(t, e->cat, e->cat_n);
    if (*null_code < 0) *null_code = table_code(t, (const unsigned char *)"\xff", 1); /* a key no string has */
    return *null_code;
}

/* A complete event's row into the columns (DECLINE where the ordinary path must take the run). */
static int add_row(Scanner *self, Out *o, const Event *e, const unsigned char *start, const unsigned char *stop,
                   const unsigned char *base, const unsigned char *markers, Py_ssize_t known) {
    if (e->name_k != STR || e->name_esc || e->ts_k != FLOAT || e->dur_k != FLOAT) return DECLINE;
    if (e->cat_k == STR && e->cat_esc) return DECLINE;
    if (!(e->ts > -self->max_ts_us && e->ts < self->max_ts_us && e->dur >= 0 && e->dur <= self->max_dur_us))
        return DECLINE;
    int64_t ints[N_INTS];
    int spelled = 0;
    for (int i = 0; i < N_INTS; i++) {
        if (e->ints_k[i] == INT) {
            if (e->ints[i] == NULL_INT) return DECLINE;
            ints[i] = e->ints[i];
        } else if (e->ints_k[i] == BIG) {
            return DECLINE;
        } else if (e->ints_k[i] == STR) {
            ints[i] = 0; /* the caller reads the string's integer */
            spelled = 1;
        } else {
            ints[i] = NULL_INT;
            o->nulls |= 1u << i;
        }
    }
    int64_t name = table_code(&self->names, e->name, e->name_n);
    if (name < 0) return NOMEM;
    int64_t cat = cat_code(&self->cats, &self->null_cat, e);
    if (cat < 0) return NOMEM;
    int64_t shapes = NULL_INT;
    if (e->dims_n) shapes = crc32_of(e->dims, e->dims_n, crc32_of(e->types, e->types_n, 0));
    uint32_t row = o->n, name32 = (uint32_t)name, cat32 = (uint32_t)cat;
    uint32_t span[2] = {(uint32_t)(start - base), (uint32_t)(stop - base)};
    if (buf_put(&o->ts, &e->ts, 8) || buf_put(&o->dur, &e->dur, 8) || buf_put(&o->shapes, &shapes, 8) ||
        buf_put(&o->name, &name32, 4) || buf_put(&o->cat, &cat32, 4) || buf_put(&o->spans, span, sizeof span))
        return NOMEM;
    for (int i = 0; i < N_INTS; i++)
        if (buf_put(&o->ints[i], &ints[i], 8)) return NOMEM;
    if (e->coll && buf_put(&o->coll, &row, 4)) return NOMEM;
    if (spelled && buf_put(&o->spelled, &row, 4)) return NOMEM;
    if ((name >= known || markers[name]) && buf_put(&o->marked, &row, 4)) return NOMEM;
    o->n++;
    return OK;
}

static int scan_run(Scanner *self, Cur *c, Out *o, const unsigned char *markers, Py_ssize_t known,
                    const unsigned char *kinded, Py_ssize_t kinds) {
    const unsigned char *base = c->p;
    int r;
    skip_ws(c);
    if (c->p >= c->end || *c->p != '[') return DECLINE;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
    } else {
        for (;;) {
            Event e;
            skip_ws(c);
            if (c->p >= c->end || *c->p != '{') return DECLINE;
            const unsigned char *start = c->p;
            if ((r = scan_event(c, &e))) return r;
            if (e.ph == 'X') {
                if ((r = add_row(self, o, &e, start, c->p, base, markers, known))) return r;
            } else if (e.ph == 'T') {
                if (e.instant && !(e.cat_k == STR && e.cat_esc)) { /* passed over where its category has no kind */
                    int64_t code = cat_code(&self->icats, &self->null_icat, &e);
                    if (code < 0) return NOMEM;
                    if (code < kinds && !kinded[code]) goto next;
                }
                uint32_t span[2] = {(uint32_t)(start - base), (uint32_t)(c->p - base)};
                if (buf_put(&o->timed, span, sizeof span)) return NOMEM;
            }
        next:;
            int more = next_item(c, ']');
            if (more < 0) return DECLINE;
            if (!more) break;
        }
    }
    skip_ws(c);
    return c->p == c->end ? OK : DECLINE;
}

static PyObject *bytes_of(const Buf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

/* The strings of codes [from, t->n) as a list (a missing category as None). */
static PyObject *new_strings(const Table *t, uint32_t from, int64_t null_code) {
    PyObject *list = PyList_New(t->n - from);
    if (!list) return NULL;
    for (uint32_t code = from; code < t->n; code++) {
        PyObject *s;
        if ((int64_t)code == null_code) {
            s = Py_NewRef(Py_None);
        } else {
            uint32_t len;
            const unsigned char *k = table_key(t, code, &len);
            s = PyUnicode_DecodeUTF8((const char *)k, len, "strict");
            if (!s) {
                Py_DECREF(list);
                return NULL;
            }
        }
        PyList_SET_ITEM(list, code - from, s);
    }
    return list;
}

PyDoc_STRVAR(scan_doc,
"scan(text, markers, kinded) -> tuple | None\n\n"
"The run ``text`` (``[ev, ...]``) in columns, or None where the ordinary path must decode it (the tables\n"
"then unchanged). ``markers``: a byte per name code known so far, nonzero for a collective marker's name;\n"
"``kinded``: a byte per instants' category code known so far, nonzero where the category has a kind (an\n"
"instant of another is passed over).\n"
"Returns (n, ts, dur, ints, nulls, shapes, name, cat, coll, marked, spans, timed, new_names, new_cats):\n"
"float64 ts and dur in microseconds; ints: six int64 columns (pid, tid, stream, device, correlation,\n"
"external id; INT64_MIN for null), nulls: a bit per column holding one; shapes: int64 CRC-32s (INT64_MIN\n"
"without input dims); name and cat: uint32 codes; coll: uint32 rows with a collective name; marked: uint32\n"
"rows whose name is a marker's or new; spans: uint32 (start, end) of each row's event in the text; timed:\n"
"the same of its instants and begin/end events; the names and categories first seen in this run; spelled:\n"
"uint32 rows with an integer column written as a string (0 in its column: the caller reads it); the\n"
"instants' categories first seen in this run.");

static PyObject *Scanner_scan(Scanner *self, PyObject *args) {
    Py_buffer text, marks, kinded;
    if (!self->names.hashes || !self->cats.hashes || !self->icats.hashes) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner.__init__ was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*y*y*", &text, &marks, &kinded)) return NULL;
    PyObject *result = NULL;
    Out o;
    memset(&o, 0, sizeof o);
    uint32_t names0 = self->names.n, cats0 = self->cats.n, icats0 = self->icats.n;
    int64_t null0 = self->null_cat, inull0 = self->null_icat;
    int r = DECLINE;
    if (text.len < (Py_ssize_t)UINT32_MAX) {
        Cur c = {(const unsigned char *)text.buf, (const unsigned char *)text.buf + text.len};
        r = scan_run(self, &c, &o, (const unsigned char *)marks.buf, marks.len, (const unsigned char *)kinded.buf,
                     kinded.len);
    }
    if (r == OK) {
        PyObject *new_names = new_strings(&self->names, names0, -1);
        PyObject *new_cats = new_names ? new_strings(&self->cats, cats0, self->null_cat) : NULL;
        PyObject *new_icats = new_cats ? new_strings(&self->icats, icats0, self->null_icat) : NULL;
        if (!new_icats) {
            Py_XDECREF(new_names);
            Py_XDECREF(new_cats);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { /* cannot be: the scan checked the text */
                PyErr_Clear();
                r = DECLINE;
            } else {
                r = NOMEM;
            }
        } else {
            result = Py_BuildValue("(kNN(NNNNNN)kNNNNNNNNNNN)", (unsigned long)o.n, bytes_of(&o.ts), bytes_of(&o.dur),
                                   bytes_of(&o.ints[0]), bytes_of(&o.ints[1]), bytes_of(&o.ints[2]),
                                   bytes_of(&o.ints[3]), bytes_of(&o.ints[4]), bytes_of(&o.ints[5]),
                                   (unsigned long)o.nulls, bytes_of(&o.shapes), bytes_of(&o.name), bytes_of(&o.cat),
                                   bytes_of(&o.coll), bytes_of(&o.marked), bytes_of(&o.spans), bytes_of(&o.timed),
                                   new_names, new_cats, bytes_of(&o.spelled), new_icats);
            if (!result) r = NOMEM;
        }
    }
    if (r != OK) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        int lost = table_truncate(&self->names, names0) | table_truncate(&self->cats, cats0) |
                   table_truncate(&self->icats, icats0);
        self->null_cat = null0;
        self->null_icat = inull0;
        PyErr_Restore(type, value, tb);
        if (lost && !PyErr_Occurred()) PyErr_NoMemory();
        if (r == NOMEM && !PyErr_Occurred()) PyErr_NoMemory();
    }
    out_free(&o);
    PyBuffer_Release(&text);
    PyBuffer_Release(&marks);
    PyBuffer_Release(&kinded);
    if (result || PyErr_Occurred()) return result;
    Py_RETURN_NONE;
}

static PyObject *Scanner_mark(Scanner *self, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("(IIILL)", self->names.n, self->cats.n, self->icats.n, (long long)self->null_cat,
                         (long long)self->null_icat);
}

static PyObject *Scanner_reset(Scanner *self, PyObject *args) {
    unsigned int names, cats, icats;
    long long null_cat, null_icat;
    if (!PyArg_ParseTuple(args, "(IIILL)", &names, &cats, &icats, &null_cat, &null_icat)) return NULL;
    if (names > self->names.n || cats > self->cats.n || icats > self->icats.n) {
        PyErr_SetString(PyExc_ValueError, "not a mark of this scanner's tables");
        return NULL;
    }
    if (table_truncate(&self->names, names) | table_truncate(&self->cats, cats) | table_truncate(&self->icats, icats))
        return PyErr_NoMemory();
    self->null_cat = null_cat < (long long)cats ? null_cat : -1;
    self->null_icat = null_icat < (long long)icats ? null_icat : -1;
    Py_RETURN_NONE;
}

static int Scanner_init(Scanner *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"max_ts_us", "max_dur_us", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "dd", kwlist, &self->max_ts_us, &self->max_dur_us)) return -1;
    table_free(&self->names);
    table_free(&self->cats);
    table_free(&self->icats);
    memset(&self->names, 0, sizeof self->names);
    memset(&self->cats, 0, sizeof self->cats);
    memset(&self->icats, 0, sizeof self->icats);
    self->null_cat = self->null_icat = -1;
    if (table_resize(&self->names, 1024) || table_resize(&self->cats, 64) || table_resize(&self->icats, 64)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void Scanner_dealloc(Scanner *self) {
    table_free(&self->names);
    table_free(&self->cats);
    table_free(&self->icats);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_VARARGS, scan_doc},
    {"mark", (PyCFunction)Scanner_mark, METH_NOARGS, PyDoc_STR("mark() -> how far the tables go now, for reset")},
    {"reset", (PyCFunction)Scanner_reset, METH_VARARGS,
     PyDoc_STR("reset(mark): forget the names and categories added since mark() (a run taken, then given up)")},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ddprof.readers.kineto._scan.Scanner",
    .tp_doc = PyDoc_STR("Scanner(max_ts_us, max_dur_us): one file's runs in columns, its tables of names and "
                        "categories kept between runs; events past the limits leave the run to the ordinary path."),
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_scan",
    .m_doc = "Columns of Kineto events straight from a run's JSON text.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__scan(void) {
    crc_init();
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
