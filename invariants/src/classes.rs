//! Header classes: header space cut into pieces no rule tells apart.
//!
//! Each field some rule constrains gets its own partition ([`FieldClasses`]):
//! its values are split, bit by bit, until every ternary any rule (or a frame
//! shape) uses on the field either contains a piece or misses it; pieces that
//! lie in exactly the same ternaries form one *class*. A header class
//! ([`Classes`], an *atom*) is one class per such field inside one frame shape.
//! Every rule's match is then a union of atoms, so all headers of an atom are
//! forwarded alike by every table of every switch, and the analysis can follow
//! one atom instead of every header in it (as AP-verifier and Delta-net do).
//!
//! Fields no rule reads stay free; classes only exist where forwarding can
//! differ.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::header::{value_bits, Cube, Ternary, N, PRESENT};

const NONE: u32 = u32::MAX;

/// A pseudo-random 128-bit tag per ternary: a piece's signature is the XOR of
/// the tags of the ternaries containing it.
fn tag(i: usize) -> u128 {
    let mut z = (i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut next = || {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = z;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    };
    ((next() as u128) << 64) | next() as u128
}

/// One node of a field's refinement tree.
#[derive(Clone, Copy)]
enum Node {
    /// Values with `bit` clear go to the first child, the others to the second.
    Split {
        bit: u64,
        kids: [u32; 2],
    },
    Leaf {
        class: u32,
    },
}

/// The partition of one field's values by the ternaries used on it.
pub struct FieldClasses {
    /// The field's slot in [`crate::header::SLOTS`].
    pub slot: usize,
    nodes: Vec<Node>,
    /// One piece of each class (every piece of a class lies in the same ternaries).
    reps: Vec<Ternary>,
    /// For each refining ternary, the classes inside it.
    within: HashMap<Ternary, Vec<u32>>,
}

struct Builder<'a> {
    keys: &'a [Ternary],
    nodes: Vec<Node>,
    leaves: Vec<u32>,
    by_sig: HashMap<u128, u32>,
    reps: Vec<Ternary>,
    /// Per ternary: ranges of `leaves` it contains.
    inside: Vec<Vec<(usize, usize)>>,
}

impl Builder<'_> {
    fn refine(&mut self, piece: Ternary, live: Vec<u32>, sig: u128) -> u32 {
        let me = self.nodes.len() as u32;
        if live.is_empty() {
            let next = self.reps.len() as u32;
            let class = *self.by_sig.entry(sig).or_insert(next);
            if class == next {
                self.reps.push(piece);
            }
            self.leaves.push(class);
            self.nodes.push(Node::Leaf { class });
            return me;
        }
        // Every live ternary fixes some bit the piece leaves free: split on
        // the highest such bit.
        let free = live.iter().fold(0u64, |m, &i| m | (self.keys[i as usize].mask & !piece.mask));
        let bit = 1u64 << (63 - free.leading_zeros());
        self.nodes.push(Node::Split { bit, kids: [0, 0] });
        let mut kids = [0u32; 2];
        for (k, kid) in kids.iter_mut().enumerate() {
            let half =
                Ternary { value: (piece.value & piece.mask) | if k == 1 { bit } else { 0 }, mask: piece.mask | bit };
            let mut rest = Vec::with_capacity(live.len());
            let mut now_inside = Vec::new();
            let mut s = sig;
            for &i in &live {
                let t = self.keys[i as usize];
                if !t.meets(half) {
                    continue;
                }
                if half.within(t) {
                    s ^= tag(i as usize);
                    now_inside.push(i);
                } else {
                    rest.push(i);
                }
            }
            let start = self.leaves.len();
            *kid = self.refine(half, rest, s);
            for i in now_inside {
                self.inside[i as usize].push((start, self.leaves.len()));
            }
        }
        self.nodes[me as usize] = Node::Split { bit, kids };
        me
    }
}

impl FieldClasses {
    /// Partitions field `slot`'s values (absent, or present with a value of
    /// the field's width) by `ternaries`.
    pub fn new(slot: usize, mut ternaries: Vec<Ternary>) -> FieldClasses {
        ternaries.sort_unstable();
        ternaries.dedup();
        let mut b = Builder {
            keys: &ternaries,
            nodes: Vec::new(),
            leaves: Vec::new(),
            by_sig: HashMap::new(),
            reps: Vec::new(),
            inside: vec![Vec::new(); ternaries.len()],
        };
        // Only values a frame can carry are cut: splitting bits beyond the
        // field's width would copy the whole partition for nothing.
        let roots = [Ternary::exact(0), Ternary { value: PRESENT, mask: !value_bits(slot) }];
        b.nodes.push(Node::Split { bit: PRESENT, kids: [0, 0] });
        let mut kids = [0u32; 2];
        for (kid, root) in kids.iter_mut().zip(roots) {
            let mut sig = 0;
            let mut live = Vec::new();
            let mut everywhere = Vec::new();
            for (i, t) in ternaries.iter().enumerate().filter(|(_, t)| t.meets(root)) {
                if root.within(*t) {
                    sig ^= tag(i);
                    everywhere.push(i);
                } else {
                    live.push(i as u32);
                }
            }
            let start = b.leaves.len();
            *kid = b.refine(root, live, sig);
            for i in everywhere {
                b.inside[i].push((start, b.leaves.len()));
            }
        }
        b.nodes[0] = Node::Split { bit: PRESENT, kids };
        // The classes inside each ternary, each once.
        let mut seen = vec![NONE; b.reps.len()];
        let mut within = HashMap::with_capacity(ternaries.len());
        for (i, ranges) in b.inside.iter().enumerate() {
            let mut classes = Vec::new();
            for &(lo, hi) in ranges {
                for &c in &b.leaves[lo..hi] {
                    if seen[c as usize] != i as u32 {
                        seen[c as usize] = i as u32;
                        classes.push(c);
                    }
                }
            }
            classes.sort_unstable();
            within.insert(ternaries[i], classes);
        }
        FieldClasses { slot, nodes: b.nodes, reps: b.reps, within }
    }

    /// Number of classes.
    pub fn len(&self) -> usize {
        self.reps.len()
    }

    /// True if the field has no classes (never: every field has at least one).
    pub fn is_empty(&self) -> bool {
        self.reps.is_empty()
    }

    /// The class holding `value`.
    pub fn class_of(&self, value: u64) -> u32 {
        let mut at = 0usize;
        loop {
            match self.nodes[at] {
                Node::Leaf { class } => return class,
                Node::Split { bit, kids } => at = kids[(value & bit != 0) as usize] as usize,
            }
        }
    }

    /// A piece of class `c`: every value of the class behaves like it.
    pub fn rep(&self, c: u32) -> Ternary {
        self.reps[c as usize]
    }

    /// The classes inside `t`, which must be one of the refining ternaries.
    pub fn within(&self, t: Ternary) -> Option<&[u32]> {
        self.within.get(&t).map(Vec::as_slice)
    }
}

/// The atoms of one frame shape: the product of each field's classes inside it.
pub struct ShapeAtoms {
    /// The shape's cube (fields no rule reads already relaxed).
    pub cube: Cube,
    /// Id of the shape's first atom.
    pub base: usize,
    /// Per atom field: the field's classes inside this shape.
    pub classes: Vec<Vec<u32>>,
    /// Per atom field: position of each class in `classes` (`u32::MAX` if outside).
    position: Vec<Vec<u32>>,
    /// Per atom field: for each refining ternary, the positions of the
    /// classes inside it, ascending.
    inside: Vec<HashMap<Ternary, Vec<u32>>>,
    /// Per atom field: how far apart atoms differing by one class are.
    strides: Vec<usize>,
    /// Number of atoms.
    pub count: usize,
}

/// Every atom of the header space, numbered densely shape by shape.
/// One atom's representative per slot ([`Classes::reps`]; `None` on slots
/// no rule constrains).
pub struct AtomReps([Option<Ternary>; N]);

impl AtomReps {
    /// True if every header of the atom satisfies the constraint (as
    /// [`Classes::atom_within`]).
    pub fn within(&self, c: &[(usize, Ternary)]) -> bool {
        c.iter().all(|&(slot, t)| self.0[slot].is_some_and(|r| r.within(t)))
    }
}

pub struct Classes {
    /// The fields some rule constrains, with their partitions.
    pub fields: Vec<FieldClasses>,
    /// Index of each slot in `fields`.
    field_of: [Option<usize>; N],
    pub shapes: Vec<ShapeAtoms>,
    /// Total atoms.
    pub count: usize,
}

impl Classes {
    /// Cuts the `shapes` (disjoint cubes covering every header a host can
    /// send) by the ternaries `constraints` use. `None` if there would be more
    /// than `limit` atoms.
    pub fn new<'a>(
        shapes: &[Cube],
        constraints: impl Iterator<Item = &'a [(usize, Ternary)]>,
        limit: usize,
    ) -> Option<Classes> {
        let mut per_slot: [Vec<Ternary>; N] = Default::default();
        for c in constraints {
            for &(slot, t) in c {
                per_slot[slot].push(t);
            }
        }
        let mut fields = Vec::new();
        let mut field_of = [None; N];
        for (slot, ts) in per_slot.into_iter().enumerate() {
            if ts.is_empty() {
                continue;
            }
            // The shapes' own ternaries too, so no class straddles two shapes.
            let mut ts = ts;
            for cube in shapes {
                ts.push(cube.pos[slot]);
                ts.extend(cube.neg.iter().filter(|(s, _)| *s as usize == slot).map(|(_, t)| *t));
            }
            field_of[slot] = Some(fields.len());
            fields.push(FieldClasses::new(slot, ts));
        }
        let mut out = Vec::new();
        let mut base = 0usize;
        for cube in shapes {
            let mut classes = Vec::new();
            let mut position = Vec::new();
            for f in &fields {
                let excluded: Vec<Ternary> =
                    cube.neg.iter().filter(|(s, _)| *s as usize == f.slot).map(|(_, t)| *t).collect();
                let inside: Vec<u32> = (0..f.len() as u32)
                    .filter(|&c| {
                        let r = f.rep(c);
                        r.within(cube.pos[f.slot]) && !excluded.iter().any(|x| r.within(*x))
                    })
                    .collect();
                let mut pos = vec![NONE; f.len()];
                for (i, &c) in inside.iter().enumerate() {
                    pos[c as usize] = i as u32;
                }
                classes.push(inside);
                position.push(pos);
            }
            let inside = fields
                .iter()
                .zip(&position)
                .map(|(fc, pos)| {
                    fc.within
                        .iter()
                        .map(|(t, cls)| (*t, cls.iter().map(|&c| pos[c as usize]).filter(|&p| p != NONE).collect()))
                        .collect()
                })
                .collect();
            let mut strides = vec![0; fields.len()];
            let mut count = 1usize;
            for i in (0..fields.len()).rev() {
                strides[i] = count;
                count = count.checked_mul(classes[i].len())?;
            }
            if base.checked_add(count)? > limit {
                return None;
            }
            out.push(ShapeAtoms { cube: cube.clone(), base, classes, position, inside, strides, count });
            base += count;
        }
        Some(Classes { fields, field_of, shapes: out, count: base })
    }

    /// The shape an atom belongs to.
    pub fn shape_of(&self, atom: usize) -> usize {
        self.shapes.partition_point(|s| s.base + s.count <= atom)
    }

    /// The class of atom `atom` on atom field `field` (an index into `fields`).
    pub fn class(&self, atom: usize, field: usize) -> u32 {
        let sh = &self.shapes[self.shape_of(atom)];
        let i = (atom - sh.base) / sh.strides[field] % sh.classes[field].len();
        sh.classes[field][i]
    }

    /// The atom field of a slot, if some rule constrains it.
    pub fn field_of(&self, slot: usize) -> Option<usize> {
        self.field_of[slot]
    }

    /// True if every header of the atom satisfies the constraint.
    pub fn atom_within(&self, atom: usize, c: &[(usize, Ternary)]) -> bool {
        c.iter().all(|&(slot, t)| match self.field_of[slot] {
            Some(f) => self.fields[f].rep(self.class(atom, f)).within(t),
            None => false,
        })
    }

    /// The atom's representative on every atom field, by slot: for testing
    /// one atom against many constraints ([`AtomReps::within`], what
    /// [`Classes::atom_within`] answers) without looking its classes up for
    /// each.
    pub fn reps(&self, atom: usize) -> AtomReps {
        let mut reps = [None; N];
        for (f, fc) in self.fields.iter().enumerate() {
            reps[fc.slot] = Some(fc.rep(self.class(atom, f)));
        }
        AtomReps(reps)
    }

    /// A cube holding exactly the headers of one piece of the atom (all of
    /// the atom behaves like it).
    pub fn cube(&self, atom: usize) -> Option<Cube> {
        let sh = &self.shapes[self.shape_of(atom)];
        let c: Vec<(usize, Ternary)> =
            self.fields.iter().enumerate().map(|(f, fc)| (fc.slot, fc.rep(self.class(atom, f)))).collect();
        sh.cube.and(&c)
    }

    /// Calls `each` with every atom inside the constraint `c`; `narrow`
    /// restricts atom fields further to the listed classes.
    pub fn for_each_atom(&self, c: &[(usize, Ternary)], narrow: &[(usize, &[u32])], mut each: impl FnMut(usize)) {
        for i in 0..self.shapes.len() {
            self.atoms_in_shape(i, c, narrow, &mut each);
        }
    }

    /// [`Classes::for_each_atom`] within shape `i` only.
    pub fn atoms_in_shape(
        &self,
        i: usize,
        c: &[(usize, Ternary)],
        narrow: &[(usize, &[u32])],
        mut each: impl FnMut(usize),
    ) {
        let sh = &self.shapes[i];
        // Per atom field, the positions allowed (`None`: all of the shape's classes).
        let mut choices: Vec<Option<Cow<[u32]>>> = Vec::with_capacity(self.fields.len());
        for (f, fc) in self.fields.iter().enumerate() {
            let mut list: Option<Cow<[u32]>> = None;
            fn keep_only<'a>(keep: Cow<'a, [u32]>, list: Option<Cow<'a, [u32]>>) -> Option<Cow<'a, [u32]>> {
                Some(match list {
                    None => keep,
                    Some(l) => Cow::Owned(intersect(&l, &keep)),
                })
            }
            for &(_, t) in c.iter().filter(|(s, _)| *s == fc.slot) {
                let keep: Cow<[u32]> = match sh.inside[f].get(&t) {
                    Some(inside) => Cow::Borrowed(inside),
                    // Not a refining ternary: test class by class.
                    None => Cow::Owned(
                        (0..sh.classes[f].len() as u32)
                            .filter(|&i| fc.rep(sh.classes[f][i as usize]).within(t))
                            .collect(),
                    ),
                };
                list = keep_only(keep, list);
            }
            for (_, classes) in narrow.iter().filter(|(nf, _)| *nf == f) {
                let mut keep: Vec<u32> =
                    classes.iter().map(|&cl| sh.position[f][cl as usize]).filter(|&p| p != NONE).collect();
                keep.sort_unstable();
                list = keep_only(Cow::Owned(keep), list);
            }
            if list.as_ref().is_some_and(|l| l.is_empty()) {
                return;
            }
            choices.push(list);
        }
        if choices.iter().enumerate().any(|(f, c)| c.as_ref().map_or(sh.classes[f].is_empty(), |l| l.is_empty())) {
            return;
        }
        product(sh, &choices, 0, sh.base, &mut each);
    }
}

/// Calls `each` with every atom of the product of `choices[f..]`, offset by
/// `base`; the last field varies fastest, in a tight loop.
fn product(sh: &ShapeAtoms, choices: &[Option<Cow<[u32]>>], f: usize, base: usize, each: &mut impl FnMut(usize)) {
    let Some(choice) = choices.get(f) else {
        each(base);
        return;
    };
    let stride = sh.strides[f];
    let last = f + 1 == choices.len();
    match choice {
        None if last => (0..sh.classes[f].len()).for_each(|i| each(base + i * stride)),
        Some(l) if last => l.iter().for_each(|&i| each(base + i as usize * stride)),
        None => (0..sh.classes[f].len()).for_each(|i| product(sh, choices, f + 1, base + i * stride, each)),
        Some(l) => l.iter().for_each(|&i| product(sh, choices, f + 1, base + i as usize * stride, each)),
    }
}

/// Intersection of two ascending lists.
fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len().min(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(v: u64, len: u32) -> Ternary {
        let m = if len == 0 { 0 } else { (u32::MAX << (32 - len)) as u64 };
        Ternary::present(v, m)
    }

    #[test]
    fn prefixes_and_suffixes_cut_values_into_the_classes_they_imply() {
        let suffix = |u: u64| Ternary::present(u, 0b11);
        let ts = vec![prefix(0x0a00_0000, 8), prefix(0x0a00_0001, 32), suffix(0), suffix(1), suffix(2), suffix(3)];
        let fc = FieldClasses::new(0, ts.clone());
        // Absent; in 10/8 with each suffix (one of which splits off 10.0.0.1);
        // outside 10/8 with each suffix.
        assert_eq!(fc.len(), 1 + 4 + 1 + 4);
        let of = |v: u64| fc.class_of(PRESENT | v);
        assert_ne!(fc.class_of(0), of(0), "absent is a class of its own");
        assert_ne!(of(0x0a00_0001), of(0x0a00_0005));
        assert_eq!(of(0x0a00_0005), of(0x0aff_0001));
        assert_ne!(of(0x0b00_0001), of(0x0a00_0005));
        assert_eq!(of(0x0b00_0001), of(0xc000_0001));
        // Every class is inside or outside every ternary, and `within` lists
        // exactly the ones inside.
        for t in ts {
            let inside = fc.within(t).unwrap();
            for c in 0..fc.len() as u32 {
                let r = fc.rep(c);
                assert!(r.within(t) || !r.meets(t));
                assert_eq!(inside.contains(&c), r.within(t));
            }
        }
    }
}
