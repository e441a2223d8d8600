//! Whether the writers' operations on one key explain what the key holds:
//! the per-key linearizability check of the crash harness's shared-key
//! workloads (`pmindex crashtest --shared-keys`; docs/design.md §8,
//! "Writers on the same keys").
//!
//! Each key is a register, and an operation on it takes effect at one
//! instant between its call and its return (its *span*, in trace events).
//! Linearizability is local (Herlihy and Wing, TOPLAS 1990, Theorem 1): a
//! history of several objects is linearizable exactly when each object's
//! sub-history is, so each key is checked alone. For a crash at event `p`
//! the question is the durable-linearizability one (Izraelevitz, Mendes and
//! Scott, DISC 2016): is there an order of
//! - every operation that returned before `p` (its span ended at or before
//!   `p`), with the result it returned, and
//! - any of the operations in flight at `p` (begun before it, not returned),
//!   with any result (a writer has one call in flight, but a `put_many`
//!   call is one operation per item, each of its own: the call is not
//!   atomic, and a read may see its first item before its second),
//!
//! that keeps each writer's own order and real time (an operation that
//! returned before another was called comes first: by an operation clock
//! read at each call and return, [`KeyOp::called`], since a read records no
//! trace event and so often shares its trace positions with the operation
//! before it), and that leaves the key
//! holding what the recovered pool holds? A read ([`Action::Get`]) is an
//! operation too: the value it returned must be the key's value at its
//! place in the order, so a read that returned a value a crash then lost is
//! a failure, unless the write it read from may still be ordered first.
//!
//! The search is over each writer's next operation in turn, with the
//! states seen (how far each writer has got, and the value) remembered, so
//! its cost is at most the product of the writers' operation counts on the
//! key times the key's values.

use std::collections::HashSet;

/// A value of one key, by its index among the values the key's operations
/// carry ([`KeyHistory::value_id`]).
pub type ValueId = u32;

/// What an operation does to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Upsert; returns whether a value was replaced. Also each item of a
    /// `put_many`, which returns nothing the check uses.
    Put(ValueId),
    /// Insert if absent; returns whether it inserted.
    Insert(ValueId),
    /// Replace if present; returns whether it replaced.
    Update(ValueId),
    /// Remove; returns whether the key was present.
    Delete,
    /// A read that returned this value (`None`: absent).
    Get(Option<ValueId>),
}

/// One operation on one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyOp {
    /// What it does.
    pub action: Action,
    /// The trace's length when it was called.
    pub begin: usize,
    /// The trace's length when it had returned; `usize::MAX` if it never
    /// returned (it panicked).
    pub end: usize,
    /// The operation clock when it was called: a shared counter every
    /// writer advances at each call and each return, so no two readings
    /// are equal. Real-time order: `a` before `b` if `a.returned <
    /// b.called`. (The trace positions say what a crash includes.)
    pub called: u64,
    /// The operation clock when it had returned (`u64::MAX`: never).
    pub returned: u64,
    /// What it returned (see [`Action`]), where known.
    pub result: Option<bool>,
    /// It may have had no effect (an item of a `put_many` that failed on a
    /// full pool, an operation that returned an error).
    pub partial: bool,
    /// Its place in its writer's workload, for messages.
    pub index: usize,
}

/// The operations of every writer on one key, each writer's in its order.
#[derive(Debug, Clone, Default)]
pub struct KeyHistory {
    /// `writers[t]`: writer `t`'s operations on the key.
    pub writers: Vec<Vec<KeyOp>>,
    /// The distinct values the operations carry ([`ValueId`] indexes it).
    pub values: Vec<std::sync::Arc<[u8]>>,
}

/// The key's state: absent, or one of its values.
type State = Option<ValueId>;

impl KeyHistory {
    /// A history of `writers` writers with no operations yet.
    pub fn new(writers: usize) -> Self {
        KeyHistory {
            writers: vec![Vec::new(); writers],
            values: Vec::new(),
        }
    }

    /// The id of `v`, added if new.
    pub fn value_id(&mut self, v: &std::sync::Arc<[u8]>) -> ValueId {
        match self.find_value(v) {
            Some(id) => id,
            None => {
                self.values.push(std::sync::Arc::clone(v));
                (self.values.len() - 1) as ValueId
            }
        }
    }

    /// The id of a value with the bytes of `v`, if any operation carries one.
    pub fn find_value(&self, v: &[u8]) -> Option<ValueId> {
        self.values
            .iter()
            .position(|x| x[..] == *v)
            .map(|i| i as ValueId)
    }

    /// Whether a crash at event `point` may leave the key holding `got`
    /// (the module doc's question). `got` is `Err(())` for a value none of
    /// the key's operations carries, which nothing explains.
    pub fn explains(&self, point: usize, got: Result<State, ()>) -> bool {
        let Ok(got) = got else { return false };
        // Per writer: operations returned by `point` (all to be placed), and
        // those begun by then (the ones after `done` are in flight: one
        // operation, or the items of one `put_many`; they may be placed).
        let done: Vec<usize> = self
            .writers
            .iter()
            .map(|ops| ops.partition_point(|o| o.end <= point))
            .collect();
        let limit: Vec<usize> = self
            .writers
            .iter()
            .zip(&done)
            .map(|(ops, &d)| d.max(ops.partition_point(|o| o.begin < point)))
            .collect();
        let mut seen = HashSet::new();
        let mut stack = vec![(vec![0usize; self.writers.len()], None::<ValueId>)];
        while let Some((pos, state)) = stack.pop() {
            if !seen.insert((pos.clone(), state)) {
                continue;
            }
            if state == got && pos.iter().zip(&done).all(|(p, d)| p >= d) {
                return true;
            }
            for (t, ops) in self.writers.iter().enumerate() {
                if pos[t] == limit[t] {
                    continue;
                }
                let op = &ops[pos[t]];
                // Real time: every operation that returned before this one
                // was called is placed already.
                let ready = self.writers.iter().enumerate().all(|(u, other)| {
                    u == t || pos[u] >= other.partition_point(|o| o.returned < op.called)
                });
                if !ready {
                    continue;
                }
                let returned = op.end <= point;
                for next in successors(op, returned, state) {
                    let mut p = pos.clone();
                    p[t] += 1;
                    stack.push((p, next));
                }
            }
        }
        false
    }

    /// The key's operations that had begun by `point`, for a message: each
    /// writer's, with what they returned and whether they had.
    pub fn describe(&self, point: usize) -> String {
        let show = |s: State| match s {
            None => "absent".to_string(),
            Some(v) => format!("{} B #{v}", self.values[v as usize].len()),
        };
        let mut parts = Vec::new();
        for (t, ops) in self.writers.iter().enumerate() {
            let mine: Vec<String> = ops
                .iter()
                .filter(|o| o.begin < point || o.end <= point)
                .map(|o| {
                    let what = match &o.action {
                        Action::Put(v) => format!("put {}", show(Some(*v))),
                        Action::Insert(v) => format!("insert {}", show(Some(*v))),
                        Action::Update(v) => format!("update {}", show(Some(*v))),
                        Action::Delete => "delete".to_string(),
                        Action::Get(v) => format!("get → {}", show(*v)),
                    };
                    let how = if o.end > point {
                        " (in flight)".to_string()
                    } else if o.partial {
                        " (failed)".to_string()
                    } else {
                        o.result.map_or(String::new(), |r| format!(" → {r}"))
                    };
                    format!("#{} {what}{how}", o.index)
                })
                .collect();
            if !mine.is_empty() {
                parts.push(format!("writer {t}: {}", mine.join(", ")));
            }
        }
        parts.join("; ")
    }
}

/// The states `op` may leave from `state`: what it does if it `returned`
/// (with its result, which must agree), anything it may do if not.
fn successors(op: &KeyOp, returned: bool, state: State) -> Vec<State> {
    let uncertain = !returned || op.partial;
    if let Action::Get(v) = &op.action {
        // A read changes nothing; one in flight or failed says nothing.
        return if uncertain || *v == state {
            vec![state]
        } else {
            Vec::new()
        };
    }
    let (next, result) = match op.action {
        Action::Put(v) => (Some(v), state.is_some()),
        Action::Insert(v) => match state {
            None => (Some(v), true),
            Some(_) => (state, false),
        },
        Action::Update(v) => match state {
            Some(_) => (Some(v), true),
            None => (state, false),
        },
        Action::Delete => (None, state.is_some()),
        Action::Get(_) => unreachable!("handled above"),
    };
    if uncertain {
        vec![state, next]
    } else if op.result.is_none_or(|r| r == result) {
        vec![next]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operation that returned `result` over `begin..end`, its clock
    /// readings the same numbers.
    fn op(action: Action, begin: usize, end: usize, result: Option<bool>) -> KeyOp {
        KeyOp {
            action,
            begin,
            end,
            called: begin as u64,
            returned: end as u64,
            result,
            partial: false,
            index: 0,
        }
    }

    fn history(writers: Vec<Vec<KeyOp>>) -> KeyHistory {
        KeyHistory {
            writers,
            values: (0..4u8).map(|i| vec![i; 3].into()).collect(),
        }
    }

    #[test]
    fn a_returned_write_must_survive_and_an_earlier_one_is_overwritten() {
        // Writer 0 puts 0 over 0..10; writer 1 puts 1 over 20..30.
        let h = history(vec![
            vec![op(Action::Put(0), 0, 10, Some(false))],
            vec![op(Action::Put(1), 20, 30, Some(true))],
        ]);
        assert!(h.explains(40, Ok(Some(1))));
        assert!(!h.explains(40, Ok(Some(0))), "the later put came after");
        assert!(!h.explains(40, Ok(None)), "both returned");
        // At 25 the second is in flight: either.
        assert!(h.explains(25, Ok(Some(0))));
        assert!(h.explains(25, Ok(Some(1))));
        assert!(!h.explains(25, Ok(None)));
        // At 5 the first is in flight and the second not begun.
        assert!(h.explains(5, Ok(None)));
        assert!(h.explains(5, Ok(Some(0))));
        assert!(!h.explains(5, Ok(Some(1))));
        assert!(!h.explains(40, Err(())));
    }

    #[test]
    fn overlapping_writes_may_take_either_order() {
        let h = history(vec![
            vec![op(Action::Put(0), 0, 30, None)],
            vec![op(Action::Put(1), 10, 20, None)],
        ]);
        assert!(h.explains(40, Ok(Some(0))));
        assert!(h.explains(40, Ok(Some(1))));
        // Their results fix the order: writer 0's put found the key absent,
        // so it came first.
        let h = history(vec![
            vec![op(Action::Put(0), 0, 30, Some(false))],
            vec![op(Action::Put(1), 10, 20, Some(true))],
        ]);
        assert!(!h.explains(40, Ok(Some(0))));
        assert!(h.explains(40, Ok(Some(1))));
    }

    #[test]
    fn results_must_agree_with_the_order() {
        // Two inserts that both say they inserted, with no delete between:
        // no order explains that.
        let h = history(vec![
            vec![op(Action::Insert(0), 0, 30, Some(true))],
            vec![op(Action::Insert(1), 10, 20, Some(true))],
        ]);
        assert!(!h.explains(40, Ok(Some(0))));
        assert!(!h.explains(40, Ok(Some(1))));
        // With a delete that found it between, each order is possible.
        let h = history(vec![
            vec![op(Action::Insert(0), 0, 30, Some(true))],
            vec![
                op(Action::Insert(1), 5, 10, Some(true)),
                op(Action::Delete, 12, 14, Some(true)),
            ],
        ]);
        assert!(h.explains(40, Ok(Some(0))));
        assert!(
            !h.explains(40, Ok(Some(1))),
            "deleted after, then 0 inserted"
        );
    }

    #[test]
    fn a_result_that_saw_a_lost_write_is_caught() {
        // Writer 0's put is in flight at the crash (40); writer 1's insert
        // returned "exists", which only that put explains: it must survive.
        let h = history(vec![
            vec![op(Action::Put(0), 0, 50, None)],
            vec![op(Action::Insert(1), 10, 20, Some(false))],
        ]);
        assert!(h.explains(40, Ok(Some(0))));
        assert!(!h.explains(40, Ok(None)), "the insert saw the put");
        // The same with a read that returned the put's value.
        let h = history(vec![
            vec![op(Action::Put(0), 0, 50, None)],
            vec![op(Action::Get(Some(0)), 10, 20, None)],
        ]);
        assert!(h.explains(40, Ok(Some(0))));
        assert!(!h.explains(40, Ok(None)), "the read saw the put");
        // A read in flight says nothing.
        assert!(h.explains(15, Ok(None)));
    }

    #[test]
    fn an_operation_that_returned_as_another_was_called_may_come_after_it() {
        // The put returned at 10 as the read was called at 10: not ordered.
        let h = history(vec![
            vec![op(Action::Put(0), 0, 10, Some(false))],
            vec![op(Action::Get(None), 10, 10, None)],
        ]);
        assert!(h.explains(20, Ok(Some(0))));
    }

    #[test]
    fn real_time_is_the_operation_clock_s_not_the_trace_s() {
        // A delete returned at trace position 10 and a read was called
        // and returned there too (a read records no event); by the clock
        // the read came after the delete, so it cannot have seen the
        // old value.
        let delete = KeyOp {
            called: 1,
            returned: 2,
            ..op(Action::Delete, 5, 10, Some(true))
        };
        let stale = KeyOp {
            called: 3,
            returned: 4,
            ..op(Action::Get(Some(0)), 10, 10, None)
        };
        let put = KeyOp {
            called: 0,
            returned: 0,
            ..op(Action::Put(0), 0, 5, Some(false))
        };
        let h = history(vec![vec![put.clone(), delete.clone()], vec![stale.clone()]]);
        assert!(!h.explains(20, Ok(None)));
        // Called before the delete returned, it may have.
        let early = KeyOp { called: 1, ..stale };
        let h = history(vec![vec![put, delete], vec![early]]);
        assert!(h.explains(20, Ok(None)));
    }

    #[test]
    fn a_read_must_see_the_value_of_its_place() {
        let h = history(vec![
            vec![
                op(Action::Put(0), 0, 5, Some(false)),
                op(Action::Put(1), 10, 15, Some(true)),
            ],
            vec![op(Action::Get(Some(0)), 20, 25, None)],
        ]);
        assert!(
            !h.explains(30, Ok(Some(1))),
            "the read came after both puts"
        );
        let h = history(vec![
            vec![
                op(Action::Put(0), 0, 5, Some(false)),
                op(Action::Put(1), 10, 22, Some(true)),
            ],
            vec![op(Action::Get(Some(0)), 20, 25, None)],
        ]);
        assert!(
            h.explains(30, Ok(Some(1))),
            "the read overlapped the second"
        );
    }

    /// The items of a `put_many` on one key: puts with the call's span.
    fn items(values: &[ValueId], begin: usize, end: usize, partial: bool) -> Vec<KeyOp> {
        values
            .iter()
            .map(|&v| KeyOp {
                partial,
                ..op(Action::Put(v), begin, end, None)
            })
            .collect()
    }

    #[test]
    fn a_put_many_in_flight_or_failed_may_leave_any_of_its_values() {
        let mut w0 = vec![op(Action::Put(0), 0, 1, Some(false))];
        w0.extend(items(&[1, 2], 2, 10, true));
        let h = history(vec![w0, vec![]]);
        for v in [0, 1, 2] {
            assert!(h.explains(20, Ok(Some(v))));
        }
        assert!(!h.explains(20, Ok(None)));
        assert!(!h.explains(20, Ok(Some(3))));
        // Returned whole: the last item.
        let h = history(vec![items(&[1, 2], 0, 10, false)]);
        assert!(h.explains(20, Ok(Some(2))));
        assert!(!h.explains(20, Ok(Some(1))));
        assert!(h.explains(5, Ok(Some(1))), "in flight");
        assert!(h.explains(5, Ok(Some(2))), "in flight");
        assert!(h.explains(5, Ok(None)), "in flight");
    }

    #[test]
    fn a_read_may_see_a_put_many_s_first_item_and_the_key_end_with_its_second() {
        // Writer 1 read item 1 (value 1) of writer 0's put_many, in flight
        // at the crash; the key may then hold 1 or 2, not what it held
        // before (absent), which the read rules out.
        let h = history(vec![
            items(&[1, 2, 3], 0, 100, false),
            vec![op(Action::Get(Some(1)), 10, 20, None)],
        ]);
        assert!(h.explains(50, Ok(Some(1))));
        assert!(h.explains(50, Ok(Some(2))));
        assert!(h.explains(50, Ok(Some(3))));
        assert!(!h.explains(50, Ok(None)), "the read saw item 1");
    }

    #[test]
    fn a_writer_s_own_order_holds() {
        // One writer: delete after put; the key must be absent.
        let h = history(vec![vec![
            op(Action::Put(0), 0, 5, Some(false)),
            op(Action::Delete, 5, 9, Some(true)),
        ]]);
        assert!(h.explains(10, Ok(None)));
        assert!(!h.explains(10, Ok(Some(0))));
        // An update that found nothing, then one that did: impossible alone.
        let h = history(vec![vec![
            op(Action::Update(0), 0, 5, Some(false)),
            op(Action::Update(1), 5, 9, Some(true)),
        ]]);
        assert!(!h.explains(10, Ok(Some(1))));
        assert!(!h.explains(10, Ok(None)));
    }

    /// One writer's random sequence on one key, one event per operation:
    /// at every point the key's state after the returned operations is
    /// explained, and with the one in flight also its state after it;
    /// no other state is.
    #[test]
    fn one_writer_s_history_is_explained_by_its_model_alone() {
        use rand::{Rng, SeedableRng};
        for seed in 0..200 {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            let mut state: State = None;
            let mut states = vec![state];
            let mut ops = Vec::new();
            for i in 0..12 {
                let v = rng.gen_range(0..4);
                let (action, result) = match rng.gen_range(0..5) {
                    0 => (Action::Put(v), Some(state.is_some())),
                    1 => (Action::Insert(v), Some(state.is_none())),
                    2 => (Action::Update(v), Some(state.is_some())),
                    3 => (Action::Delete, Some(state.is_some())),
                    _ => (Action::Get(state), None),
                };
                state = match action {
                    Action::Put(v) => Some(v),
                    Action::Insert(v) if state.is_none() => Some(v),
                    Action::Update(v) if state.is_some() => Some(v),
                    Action::Delete => None,
                    _ => state,
                };
                states.push(state);
                ops.push(op(action, 2 * i, 2 * i + 2, result));
            }
            let h = history(vec![ops]);
            for point in 0..=25 {
                let done = point / 2;
                let flying = point % 2 == 1 && done < 12;
                for s in [None, Some(0), Some(1), Some(2), Some(3)] {
                    let want = s == states[done] || (flying && s == states[done + 1]);
                    assert_eq!(
                        h.explains(point, Ok(s)),
                        want,
                        "seed {seed}, point {point}, state {s:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_operation_that_never_returned_stays_in_flight() {
        let h = history(vec![vec![op(Action::Put(0), 0, usize::MAX, None)]]);
        assert!(h.explains(usize::MAX - 1, Ok(None)));
        assert!(h.explains(usize::MAX - 1, Ok(Some(0))));
    }
}
