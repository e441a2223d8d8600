//! The conformance suite, run by every engine: one line per engine.
//! The scenarios are in `tests/common/conformance.rs`.

mod common;

use common::conformance::conformance_suite;

conformance_suite!(pmlog, "pmlog");
conformance_suite!(hart, "hart");
// Hash keys of 3 bytes: the hashed index of ARTs instead of the direct one.
conformance_suite!(hart_hashed, "hart:hash_key_len=3");
// Hash keys of 1 byte, and the paper's persist order.
conformance_suite!(hart_k1_paper, "hart:hash_key_len=1,persist_order=paper");
// Without the point index: searches, updates and inserts descend the ARTs.
conformance_suite!(hart_no_points, "hart:point_index=off");
// Searches that probe the point index without the ART's lock first.
conformance_suite!(hart_optimistic, "hart:reads=optimistic");
// A point index on every ART of more than 2 keys (by default 64): built
// and dropped as the scenarios' small ARTs grow and shrink.
conformance_suite!(hart_points_above_2, "hart:point_index_above=2");
// Both: unlocked reads of the point index on every ART that holds a key.
conformance_suite!(
    hart_optimistic_everywhere,
    "hart:reads=optimistic,point_index_above=0"
);
// Writers of different root children at once (the default), and the
// tree-wide lock.
conformance_suite!(wort, "wort");
conformance_suite!(wort_locked, "wort:writers=locked");
conformance_suite!(woart, "woart");
conformance_suite!(woart_locked, "woart:writers=locked");
conformance_suite!(art_cow, "art-cow");
conformance_suite!(art_cow_locked, "art-cow:writers=locked");
conformance_suite!(fptree, "fptree");
// Leaves of 3 slots: a split every few inserts, leaves unlinked often.
conformance_suite!(fptree_small_leaves, "fptree:leaf_slots=3");
conformance_suite!(dptree, "dptree");
// Leaves of 3 slots and a merge every 2 writes: the scenarios' writes go
// through merges that write in place, rewrite, consolidate and empty
// leaves.
conformance_suite!(dptree_merging, "dptree:leaf_slots=3,merge_min=2");
conformance_suite!(fastfair, "fastfair");
// Nodes of 4 entry slots (3 keys): a split every few inserts, at every
// level of a tall tree.
conformance_suite!(fastfair_small_nodes, "fastfair:node_bytes=128");
conformance_suite!(art_bplus, "art-bplus");
