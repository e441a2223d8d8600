/*
 * driver.c's adapter for its self-test (scripts/authors/selftest.sh): an
 * open-addressing table of key indexes in place of the authors' code, so
 * that driver.c's key reading, shuffle, checks and output can be tested
 * where the authors' code is not at hand.
 */
#define ENGINE_NAME "mock"

static uint64_t *slots; /* key index + 1, 0 for empty */
static uint64_t **vals;
static uint64_t mask;

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
    mask -= 1;
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
    return slots[s] != 0 && *vals[s] == want;
}
