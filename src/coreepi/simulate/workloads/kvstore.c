/* kvstore: the fleet's ordinary C service, a small in-memory key-value store.
 *
 * It serves synthetic requests in a loop (parse, hash, look up or insert,
 * checksum, encode) over a chained hash table on the heap: pointer-rich, so
 * a flipped heap bit is followed somewhere, and busy in many small functions,
 * so a fault injected at a random instant lands in varied places.
 *
 *   kvstore BUG [SECONDS]
 *
 * BUG picks the bug this run triggers, after a few thousand requests, or
 * "none" (a healthy run, the target of the fault injector) which serves for
 * SECONDS (default 2) and exits 0:
 *
 *   null-deref-v2    the response cache added in version 2 dereferences a
 *                    NULL entry after an eviction (compiled in only with
 *                    -DAPP_VERSION=2: in version 1 the run is healthy)
 *   kernel-ring      the kernel reports 0 ring entries (one kernel version
 *                    does): ring_slot() divides by it (SIGFPE)
 *   assert           a response longer than its buffer trips an assert
 *   wild-pointer     compact_bucket() follows a stale entry pointer
 *   double-free      release_entry() frees an evicted entry twice
 *   stack-overflow   walk_chain() recurses without end
 *
 * Built -O1 (no frame pointer) -g by the simulator; x86-64 or any arch.
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef APP_VERSION
#define APP_VERSION 1
#endif

#define NOINLINE __attribute__((noinline))
#define BUCKETS 509
#define KEYS 1500

struct entry {
    struct entry *next;
    uint64_t key;
    long value;
    long hits;
    char name[24];
};

struct request {
    int op; /* 0 get, 1 put, 2 update */
    uint64_t key;
    long value;
    char name[24];
};

static struct entry *table[BUCKETS];
static char response[128];
static volatile long sink;
static int bug;
static long requests;
#if APP_VERSION >= 2
static struct entry *cache_slot[64];
#endif

enum { BUG_NONE, BUG_NULL_V2, BUG_KERNEL_RING, BUG_ASSERT, BUG_WILD, BUG_DOUBLE_FREE, BUG_STACK };

NOINLINE uint64_t hash_key(uint64_t key)
{
    uint64_t h = key * 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 24; i++)
        h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ULL + (uint64_t)i;
    return h;
}

NOINLINE void parse_request(uint64_t seq, struct request *req)
{
    uint64_t x = hash_key(seq);
    req->op = (int)(x % 3);
    req->key = (x >> 8) % KEYS;
    req->value = (long)(x >> 20);
    for (int i = 0; i < 23; i++)
        req->name[i] = (char)('a' + (x >> (i % 50)) % 26);
    req->name[23] = 0;
}

NOINLINE struct entry *table_find(uint64_t key)
{
    struct entry *e = table[hash_key(key) % BUCKETS];
    while (e && e->key != key)
        e = e->next;
    return e;
}

NOINLINE struct entry *table_insert(const struct request *req)
{
    struct entry *e = malloc(sizeof *e);
    uint64_t b = hash_key(req->key) % BUCKETS;
    e->key = req->key;
    e->value = req->value;
    e->hits = 0;
    memcpy(e->name, req->name, sizeof e->name);
    e->next = table[b];
    table[b] = e;
    return e;
}

#if APP_VERSION >= 2
/* Version 2's response cache: a hit refreshes the slot from the entry; after
 * an eviction the slot is NULL and the refresh dereferences it. */
NOINLINE long cache_refresh(uint64_t key, int evicted)
{
    struct entry **slot = &cache_slot[key % 64];
    if (evicted)
        *slot = NULL;
    else if (*slot == NULL)
        *slot = table_find(key);
    if (bug == BUG_NULL_V2 && evicted)
        return (*(struct entry *volatile *)slot)->value; /* NULL-DEREF-V2 */
    return *slot ? (*slot)->value : 0;
}
#endif

NOINLINE long table_lookup(uint64_t key)
{
    struct entry *e = table_find(key);
    long v = e ? e->value : -1;
#if APP_VERSION >= 2
    v += cache_refresh(key, requests % 4096 == 4095);
#endif
    if (e)
        e->hits++;
    return v;
}

NOINLINE long checksum_block(const char *p, size_t n)
{
    long sum = 0;
    for (size_t i = 0; i < n; i++)
        sum = sum * 31 + p[i];
    return sum;
}

NOINLINE size_t encode_response(long value, const char *name)
{
    size_t len = 0;
    char *out = response;
    for (int i = 0; i < 16; i++)
        out[len++] = "0123456789abcdef"[(value >> (i * 4)) & 15];
    for (int i = 0; name[i] && len < 100; i++)
        out[len++] = name[i];
    if (bug == BUG_ASSERT && requests > 3000)
        len += 200; /* the response grew past its buffer */
    assert(len < sizeof response);
    return len;
}

/* The io ring size the kernel reports; one kernel version reports 0. */
NOINLINE int kernel_ring_entries(void)
{
    return bug == BUG_KERNEL_RING && requests > 2000 ? 0 : 256;
}

NOINLINE long ring_slot(uint64_t seq)
{
    volatile int entries = kernel_ring_entries();
    return (long)(seq % (uint64_t)entries);
}

NOINLINE long walk_chain(struct entry *e, long depth)
{
    volatile char frame[64];
    frame[0] = (char)depth;
    if (e == NULL && bug != BUG_STACK)
        return depth;
    return walk_chain(e ? e->next : NULL, depth + 1) + frame[0];
}

NOINLINE void compact_bucket(uint64_t b)
{
    struct entry *e = table[b % BUCKETS];
    if (bug == BUG_WILD && requests > 2500)
        e = (struct entry *)((uintptr_t)0x5a5a5a5a000 + ((b & 0xff) << 4)); /* stale pointer */
    long n = 0;
    while (e) {
        n += e->hits;
        e = e->next;
    }
    sink += n;
}

NOINLINE void release_entry(struct entry *e)
{
    free(e);
    if (bug == BUG_DOUBLE_FREE && requests > 2000)
        free(e); /* evicted twice */
}

NOINLINE void evict(uint64_t key)
{
    struct entry **p = &table[hash_key(key) % BUCKETS];
    while (*p && (*p)->key != key)
        p = &(*p)->next;
    if (*p) {
        struct entry *e = *p;
        *p = e->next;
        release_entry(e);
    }
}

NOINLINE long handle_request(uint64_t seq)
{
    struct request req;
    parse_request(seq, &req);
    long v = 0;
    switch (req.op) {
    case 0:
        v = table_lookup(req.key);
        break;
    case 1:
        if (!table_find(req.key))
            table_insert(&req);
        else if (seq % 7 == 0)
            evict(req.key);
        break;
    default: {
        struct entry *e = table_find(req.key);
        if (e)
            e->value += req.value;
    }
    }
    v += ring_slot(seq);
    size_t len = encode_response(v, req.name);
    return checksum_block(response, len);
}

NOINLINE long serve_batch(uint64_t first, int n)
{
    long acc = 0;
    for (int i = 0; i < n; i++) {
        requests++;
        acc ^= handle_request(first + (uint64_t)i);
    }
    compact_bucket(first);
    if (bug == BUG_STACK && requests > 2000)
        acc += walk_chain(table[first % BUCKETS], 0);
    return acc;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    static const char *bugs[] = {"none", "null-deref-v2", "kernel-ring", "assert",
                                 "wild-pointer", "double-free", "stack-overflow"};
    const char *which = argc > 1 ? argv[1] : "none";
    double seconds = argc > 2 ? atof(argv[2]) : 2.0;
    bug = -1;
    for (int i = 0; i < (int)(sizeof bugs / sizeof bugs[0]); i++)
        if (!strcmp(which, bugs[i]))
            bug = i;
    if (bug < 0) {
        fprintf(stderr, "kvstore: unknown bug %s\n", which);
        return 2;
    }
    double deadline = now() + seconds;
    uint64_t seq = 1;
    while (now() < deadline) {
        sink ^= serve_batch(seq, 256);
        seq += 256;
    }
    printf("kvstore %d: %ld requests, no crash\n", APP_VERSION, requests);
    return 0;
}
