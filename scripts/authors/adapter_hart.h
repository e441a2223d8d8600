/*
 * driver.c's adapter for the authors' HART (github.com/CASL-SDSU/HART):
 * their hash table (hash.c) of ARTs (art.c), called as their hadix.c calls
 * it, but with explicit lengths. What differs from hadix.c, and why:
 *   - The key is split with memcpy, not strncpy/strlen, so keys holding a 0
 *     byte (most 8-byte integer keys) keep all their bytes.
 *   - Their hash table takes C strings, so a hash key holding a 0 byte is
 *     given as 3 characters, its 16 bits 6, 6 and 4 at a time, each plus
 *     0x40 (a raw hash key is 2 characters, so the two forms cannot meet).
 *     A key of 1 byte is a hash key of its own, 4 characters (0x01, its two
 *     halves plus 0x40, 0x01), with an empty ART key. No form is longer:
 *     their probing computes hash_a + attempt * hash_b in an int, which
 *     with 5-character strings overflows from the second probe and indexes
 *     the table with a negative number (3 characters: after about 140
 *     probes; at most 69 were seen on these key sets).
 *   - The ART key is the key's bytes after the hash key and a 0 byte, as
 *     libart (which art.c is) expects of C strings: their ART cannot hold a
 *     key that is a prefix of another (dictionary words are), and with the
 *     0 byte none is, unless keys that hold 0 bytes differ in length (no
 *     key set here has such keys). It costs one byte per leaf key.
 * The leaf holds at most sizeof(art_leaf.key) bytes of ART key (24 as
 * published), so keys of up to 25 bytes (compare.sh writes the dictionary
 * without its longer words, for both sides).
 */
#include "art.h"
#include "hash.h"

#define ENGINE_NAME "hart"

/* Counters that art.c declares extern (hadix.c defines them). */
int extra_latency, num_leafs, num_node4, num_node16, num_node48, num_node256;
int art_tree_init2(art_tree *t, art_log *head);
ht_header *ht_new(ht_header *ht, int node_num);

static ht_header table;

static int adapter_accepts(const uint8_t *key, uint32_t len)
{
    (void)key;
    uint32_t art_len = (len > HASH_KEY_LEN ? len - HASH_KEY_LEN : 0) + 1;
    return len >= 1 && art_len <= sizeof(((art_leaf *)0)->key);
}

/* The hash key of `key` as a C string in `h` (at least 5 bytes). */
static void hash_key(const uint8_t *key, uint32_t len, char *h)
{
    if (len >= 2 && key[0] != 0 && key[1] != 0) {
        h[0] = (char)key[0];
        h[1] = (char)key[1];
        h[2] = 0;
    } else if (len >= 2) {
        h[0] = (char)(0x40 | key[0] >> 2);
        h[1] = (char)(0x40 | (key[0] & 3) << 4 | key[1] >> 4);
        h[2] = (char)(0x40 | (key[1] & 15));
        h[3] = 0;
    } else {
        h[0] = 1;
        h[1] = (char)(0x40 | key[0] >> 4);
        h[2] = (char)(0x40 | (key[0] & 15));
        h[3] = 1;
        h[4] = 0;
    }
}

/* The ART key (with its 0 byte) in `a`; returns its length. */
static int art_key(const uint8_t *key, uint32_t len, unsigned char *a)
{
    uint32_t n = len > HASH_KEY_LEN ? len - HASH_KEY_LEN : 0;
    memcpy(a, key + (len - n), n);
    a[n] = 0;
    return (int)n + 1;
}

static void adapter_init(uint64_t n)
{
    (void)n;
    table.leaf_head = NULL;
    ht_new(&table, NUM_BUCKET);
}

static void adapter_insert(const uint8_t *key, uint32_t len, uint64_t *value)
{
    char h[6];
    unsigned char a[sizeof(((art_leaf *)0)->key)];
    hash_key(key, len, h);
    int n = art_key(key, len, a);
    art_tree *t = (art_tree *)ht_search(&table, h, 1);
    art_insert(t, a, n, value);
}

/* 1 if the key is found with this value (the value is read, as ours is). */
static int adapter_search(const uint8_t *key, uint32_t len, uint64_t want)
{
    char h[6];
    unsigned char a[sizeof(((art_leaf *)0)->key)];
    hash_key(key, len, h);
    int n = art_key(key, len, a);
    art_tree *t = (art_tree *)ht_search(&table, h, 0);
    if (t == NULL)
        return 0;
    uint64_t *v = art_search(t, a, n);
    return v != NULL && *v == want;
}
