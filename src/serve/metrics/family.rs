//! The declarative form of a metric family: name, type, help, unit and a
//! function that gives its samples for one item (a device, the poll). Owns
//! the rule that a family is written whole, HELP and TYPE before its
//! samples, and which families are left out when they have no sample. It
//! knows no metric names and does no escaping (the writer does).

use super::text::{Kind, Value, Writer};

/// A sample value as a family computes it: counts print exactly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Num {
    Int(u64),
    Float(f64),
}

impl From<u64> for Num {
    fn from(v: u64) -> Self {
        Num::Int(v)
    }
}

impl From<f64> for Num {
    fn from(v: f64) -> Self {
        Num::Float(v)
    }
}

impl From<bool> for Num {
    fn from(v: bool) -> Self {
        Num::Int(u64::from(v))
    }
}

impl Value for Num {
    fn write_to(&self, out: &mut String) {
        match self {
            Num::Int(v) => v.write_to(out),
            Num::Float(v) => v.write_to(out),
        }
    }
}

/// Receives one sample: its labels and value.
pub(super) type Emit<'e> = dyn FnMut(&[(&str, &str)], Num) + 'e;

/// One family of a table.
pub(super) struct Family<T> {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// The base unit the name ends in (before `_total`), `""` for none.
    /// Kept beside the name so the unit tests hold names to it and an
    /// OpenMetrics `# UNIT` line can be added without a second list.
    pub unit: &'static str,
    /// Left out whole (no HELP or TYPE) when no item gives a sample, for
    /// facts that may not exist yet (the driver, a first successful poll).
    /// Otherwise the family is always announced, so a missing sample reads
    /// as "unknown now", not as "this exporter has no such metric".
    pub optional: bool,
    /// Calls `emit` once per sample of `item`; not at all for an absent
    /// value (absent is not zero).
    pub samples: fn(&T, &mut Emit<'_>),
}

impl<T> Family<T> {
    /// A family that is announced even when no item gives a sample; the
    /// tables build every family with it.
    pub const fn new(
        name: &'static str,
        kind: Kind,
        unit: &'static str,
        help: &'static str,
        samples: fn(&T, &mut Emit<'_>),
    ) -> Self {
        Family {
            name,
            kind,
            help,
            unit,
            optional: false,
            samples,
        }
    }

    /// The same family, left out whole while no item gives a sample.
    pub const fn optional(self) -> Self {
        Family { optional: true, ..self }
    }

    /// Writes the family: HELP and TYPE, then the samples of every item.
    pub fn write<'i>(&self, w: &mut Writer, items: impl IntoIterator<Item = &'i T>)
    where
        T: 'i,
    {
        debug_assert!(
            self.unit.is_empty() || self.name.trim_end_matches("_total").ends_with(self.unit),
            "{} does not end in its unit {}",
            self.name,
            self.unit
        );
        let mut announced = !self.optional;
        if announced {
            w.family(self.name, self.kind, self.help);
        }
        for item in items {
            (self.samples)(item, &mut |labels, v| {
                if !announced {
                    w.family(self.name, self.kind, self.help);
                    announced = true;
                }
                w.sample(self.name, labels, v);
            });
        }
    }
}

/// Writes every family of `table` in order, each over all `items`.
pub(super) fn write_table<T>(w: &mut Writer, table: &[Family<T>], items: &[T]) {
    for f in table {
        f.write(w, items);
    }
}
