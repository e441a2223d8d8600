/*
 * Runs the authors' published code (HART, WORT, WOART) on the same keys, in
 * the same order, as examples/search_probe.rs runs ours, and prints its
 * figures in search_probe's format:
 *
 *     <engine>: key digest <n> <hex> <hex>
 *     <engine>: insert <ns> ns/op
 *     <engine>: search <ns> ns/op      (one line per pass)
 *
 * The digest line is search_probe's: an FNV-1a digest of the keys in
 * loading order and in search order (each key's length as a little-endian
 * u32, then its bytes), so that selftest.sh can check that both drivers
 * do the same work on the same key file.
 *
 * Usage: <engine> KEYFILE N
 *
 * KEYFILE holds records of a little-endian u32 length and that many bytes
 * (examples/write_keys.rs writes them); the first N are used in file order.
 * Values are 8 bytes, i + 1 for key i. Searches run over all keys in the
 * order search_probe shuffles them (the same shuffle), SEARCHES passes
 * (default 3), and every key must be found with its value. LFENCE=1 puts
 * an lfence after each search, as search_probe's LFENCE=1 does: searches
 * one after the other, without overlap.
 *
 * The engine is chosen at compile time: -DENGINE_HART, -DENGINE_WORT or
 * -DENGINE_WOART, with the authors' sources on the include path
 * (scripts/authors/compare.sh builds them). This file is ours; the authors'
 * code is fetched, never kept in this repository.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t splitmix(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* The keys back to back; key i is bytes[start[i] .. start[i + 1]). */
static uint8_t *bytes;
static uint64_t *start;
static uint64_t n;

static void *alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static void read_keys(const char *path, uint64_t want)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (size < 0) {
        perror(path);
        exit(1);
    }
    uint8_t *raw = alloc((size_t)size);
    if (fread(raw, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "%s: cannot read\n", path);
        exit(1);
    }
    fclose(f);
    /* A record takes at least 4 bytes: no more keys than that. */
    if (want > (uint64_t)size / 4)
        want = (uint64_t)size / 4;
    bytes = alloc((size_t)size);
    start = alloc(sizeof(uint64_t) * (want + 1));
    uint64_t at = 0, out = 0;
    n = 0;
    while (n < want && at + 4 <= (uint64_t)size) {
        uint32_t len;
        memcpy(&len, raw + at, 4);
        if (at + 4 + len > (uint64_t)size)
            break;
        start[n] = out;
        memcpy(bytes + out, raw + at + 4, len);
        out += len;
        at += 4 + len;
        n++;
    }
    start[n] = out;
    free(raw);
}

#define KEY(i) (bytes + start[i])
#define KEYLEN(i) ((uint32_t)(start[(i) + 1] - start[i]))

/* FNV-1a over the keys idx[0..n) (all keys in file order when idx is
 * NULL), as search_probe's digest line. */
static uint64_t digest(const uint64_t *idx)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t i = idx ? idx[k] : k;
        uint32_t len = KEYLEN(i);
        uint8_t le[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                         (uint8_t)(len >> 24)};
        for (int b = 0; b < 4; b++)
            h = (h ^ le[b]) * 0x100000001b3ull;
        for (uint32_t b = 0; b < len; b++)
            h = (h ^ KEY(i)[b]) * 0x100000001b3ull;
    }
    return h;
}

#if defined(ENGINE_HART)
#include "adapter_hart.h"
#elif defined(ENGINE_WORT) || defined(ENGINE_WOART)
#include "adapter_wort.h"
#elif defined(ENGINE_MOCK)
#include "adapter_mock.h"
#else
#error "define ENGINE_HART, ENGINE_WORT, ENGINE_WOART or ENGINE_MOCK"
#endif

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s KEYFILE N\n", argv[0]);
        return 2;
    }
    read_keys(argv[1], strtoull(argv[2], NULL, 10));
    if (n == 0) {
        fprintf(stderr, "%s: no keys (N must be a positive number)\n", argv[1]);
        return 1;
    }
    const char *s = getenv("SEARCHES");
    int lfence = getenv("LFENCE") != NULL;
    int searches = s ? atoi(s) : 3;
    for (uint64_t i = 0; i < n; i++) {
        if (!adapter_accepts(KEY(i), KEYLEN(i))) {
            fprintf(stderr, "%s: key %llu (%u bytes) is beyond what this code takes\n",
                    ENGINE_NAME, (unsigned long long)i, KEYLEN(i));
            return 1;
        }
    }
    uint64_t *values = alloc(sizeof(uint64_t) * n);
    for (uint64_t i = 0; i < n; i++)
        values[i] = i + 1;
    adapter_init(n);

    double t = now_ns();
    for (uint64_t i = 0; i < n; i++)
        adapter_insert(KEY(i), KEYLEN(i), &values[i]);
    printf("%s: insert %.0f ns/op\n", ENGINE_NAME, (now_ns() - t) / (double)n);

    /* search_probe's shuffle, step for step. */
    uint64_t *order = alloc(sizeof(uint64_t) * n);
    for (uint64_t i = 0; i < n; i++)
        order[i] = i;
    for (uint64_t i = n; i-- > 1;) {
        uint64_t j = splitmix(i ^ 77) % (i + 1);
        uint64_t x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    printf("%s: key digest %llu %016llx %016llx\n", ENGINE_NAME, (unsigned long long)n,
           (unsigned long long)digest(NULL), (unsigned long long)digest(order));
    for (int pass = 0; pass < searches; pass++) {
        uint64_t found = 0;
        t = now_ns();
        for (uint64_t k = 0; k < n; k++) {
            uint64_t i = order[k];
            found += adapter_search(KEY(i), KEYLEN(i), i + 1);
            if (lfence)
                __asm__ volatile("lfence" ::: "memory");
        }
        double ns = (now_ns() - t) / (double)n;
        if (found != n) {
            fprintf(stderr, "%s: %llu of %llu keys found with their value\n", ENGINE_NAME,
                    (unsigned long long)found, (unsigned long long)n);
            return 1;
        }
        printf("%s: search %.0f ns/op\n", ENGINE_NAME, ns);
    }
    return 0;
}
