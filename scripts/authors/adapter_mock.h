/*
 * driver.c's adapter for its self-test (scripts/authors/selftest.sh): an
 * open-addressing table of key indexes in place of the authors' code, so
 * that driver.c's key reading, shuffle, checks and output can be tested
 * where the authors' code is not at hand.
 */
#include <unistd.h>

#define ENGINE_NAME "mock"

static uint64_t *slots; /* key index + 1, 0 for empty */
static uint64_t **vals;
static uint64_t *hits; /* searches of the slot's key */
static uint64_t mask;

/* At exit: every key was searched as often as every other, at least once
 * if there were searches (a driver that skipped or repeated keys fails). */
static void mock_check_hits(void)
{
    uint64_t want = UINT64_MAX;
    for (uint64_t s = 0; s <= mask; s++) {
        if (slots[s] == 0)
            continue;
        if (want == UINT64_MAX)
            want = hits[s];
        if (hits[s] != want) {
            fprintf(stderr, "mock: key %llu searched %llu times, another %llu times\n",
                    (unsigned long long)(slots[s] - 1), (unsigned long long)hits[s],
                    (unsigned long long)want);
            _exit(1);
        }
    }
}

static int adapter_accepts(const uint8_t *key, uint32_t len)
{
    (void)key;
    (void)len;
    return 1;
}

static uint64_t mock_hash(const uint8_t *key, uint32_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < len; i++)
        h = (h ^ key[i]) * 0x100000001b3ull;
    return h;
}

static void adapter_init(uint64_t n)
{
    mask = 1;
    while (mask < 2 * n)
        mask <<= 1;
    slots = calloc(mask, sizeof(uint64_t));
    vals = calloc(mask, sizeof(uint64_t *));
    hits = calloc(mask, sizeof(uint64_t));
    if (!slots || !vals || !hits) {
        fprintf(stderr, "mock: out of memory\n");
        exit(1);
    }
    mask -= 1;
    atexit(mock_check_hits);
}

/* The slot holding `key`, or the empty slot where it would go. */
static uint64_t mock_find(const uint8_t *key, uint32_t len)
{
    uint64_t s = mock_hash(key, len) & mask;
    while (slots[s] != 0) {
        uint64_t i = slots[s] - 1;
        if (KEYLEN(i) == len && memcmp(KEY(i), key, len) == 0)
            break;
        s = (s + 1) & mask;
    }
    return s;
}

static void adapter_insert(const uint8_t *key, uint32_t len, uint64_t *value)
{
    uint64_t s = mock_find(key, len);
    slots[s] = *value; /* driver.c gives key i the value i + 1 */
    vals[s] = value;
}

static int adapter_search(const uint8_t *key, uint32_t len, uint64_t want)
{
    uint64_t s = mock_find(key, len);
    hits[s]++;
    return slots[s] != 0 && *vals[s] == want;
}
