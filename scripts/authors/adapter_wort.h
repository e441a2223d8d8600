/*
 * driver.c's adapter for the authors' WORT and WOART (SeKwonLee/WORT,
 * src/wort and src/woart): 8-byte integer keys, a leaf holding a pointer to
 * the caller's value. Our keys are big-endian 8-byte strings, so the integer
 * is the key read big-endian: the same order, the same tree shape.
 */
#ifdef ENGINE_WOART
#include "woart.h"
#define ENGINE_NAME "woart"
#else
#include "wort.h"
#define ENGINE_NAME "wort"
#endif

static art_tree tree;

static int adapter_accepts(const uint8_t *key, uint32_t len)
{
    (void)key;
    return len == 8;
}

static unsigned long key_u64(const uint8_t *key)
{
    uint64_t k;
    memcpy(&k, key, 8);
    return __builtin_bswap64(k);
}

static void adapter_init(uint64_t n)
{
    (void)n;
    art_tree_init(&tree);
}

static void adapter_insert(const uint8_t *key, uint32_t len, uint64_t *value)
{
    art_insert(&tree, key_u64(key), (int)len, value);
}

/* 1 if the key is found with this value (the value is read, as ours is). */
static int adapter_search(const uint8_t *key, uint32_t len, uint64_t want)
{
    uint64_t *v = art_search(&tree, key_u64(key), (int)len);
    return v != NULL && *v == want;
}
