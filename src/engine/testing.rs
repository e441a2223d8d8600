//! Helpers of the engines' unit tests: a model, and the comparison of a
//! tree with it.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::SerialEngine;

/// What a tree should hold.
pub(crate) type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The pairs of `t` in `lo..hi`, by its scan.
pub(crate) fn contents_in<E: SerialEngine + ?Sized>(
    t: &E,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    t.scan(lo, hi, &mut |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        true
    })
    .unwrap();
    out
}

/// Every pair of `t`, by its scan.
pub(crate) fn contents<E: SerialEngine + ?Sized>(t: &E) -> Vec<(Vec<u8>, Vec<u8>)> {
    contents_in(t, Bound::Unbounded, Bound::Unbounded)
}

/// Asserts that `t` passes its check and holds exactly `model`, by its
/// scan, its count and a search of every key.
pub(crate) fn same<E: SerialEngine + ?Sized>(t: &E, model: &Model) {
    t.check().unwrap();
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(contents(t), want);
    assert_eq!(t.len(), model.len() as u64);
    for (k, v) in model {
        let mut got = None;
        assert!(t.get_with(k, &mut |x| got = Some(x.to_vec())).unwrap());
        assert_eq!(got.as_deref(), Some(&v[..]));
    }
}
