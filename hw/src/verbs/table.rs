//! A table of live objects keyed by small ids.
//!
//! Ids are never reused within one device, so a stale handle names nothing instead of naming
//! a newer object.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// Objects of one kind, keyed by id.
pub(super) struct Table<T> {
    kind: &'static str,
    next: u32,
    items: BTreeMap<u32, T>,
}

impl<T> Table<T> {
    /// An empty table of objects named `kind` in errors (`"QP"`, `"CQ"`, ...).
    pub(super) fn new(kind: &'static str) -> Self {
        Table {
            kind,
            next: 1,
            items: BTreeMap::new(),
        }
    }

    /// Stores `item` and returns its id.
    pub(super) fn insert(&mut self, item: T) -> Result<u32> {
        let id = self.next;
        self.next = self
            .next
            .checked_add(1)
            .ok_or_else(|| Error::Resources(format!("{} handles exhausted", self.kind)))?;
        self.items.insert(id, item);
        Ok(id)
    }

    /// The object with this id.
    pub(super) fn get(&self, id: u32) -> Result<&T> {
        self.items.get(&id).ok_or(Error::UnknownHandle {
            kind: self.kind,
            id,
        })
    }

    /// The object with this id, mutably.
    pub(super) fn get_mut(&mut self, id: u32) -> Result<&mut T> {
        self.items.get_mut(&id).ok_or(Error::UnknownHandle {
            kind: self.kind,
            id,
        })
    }

    /// Removes and returns the object with this id.
    pub(super) fn remove(&mut self, id: u32) -> Result<T> {
        self.items.remove(&id).ok_or(Error::UnknownHandle {
            kind: self.kind,
            id,
        })
    }

    /// Every `(id, object)`, in id order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.items.iter().map(|(&k, v)| (k, v))
    }

    /// Removes every object, newest first (reverse creation order).
    pub(super) fn drain_newest_first(&mut self) -> Vec<(u32, T)> {
        let mut v: Vec<(u32, T)> = std::mem::take(&mut self.items).into_iter().collect();
        v.reverse();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_not_reused_and_unknown_ids_are_named() {
        let mut t = Table::new("QP");
        let a = t.insert('a').unwrap();
        let b = t.insert('b').unwrap();
        assert_ne!(a, b);
        assert_eq!(t.remove(a).unwrap(), 'a');
        let c = t.insert('c').unwrap();
        assert!(c != a && c != b);
        let err = t.get(a).unwrap_err().to_string();
        assert!(err.contains("QP") && err.contains(&a.to_string()), "{err}");
        let order: Vec<char> = t.drain_newest_first().into_iter().map(|(_, v)| v).collect();
        assert_eq!(order, vec!['c', 'b']);
    }
}
