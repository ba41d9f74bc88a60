//! The kernel's own type information (BTF): where fields of kernel structures sit.
//!
//! Raw tracepoints hand the programs pointers to kernel structures (a task, the saved
//! registers) instead of a record laid out by tracefs. Their layouts change with the
//! kernel's version and configuration, so the offsets the programs read at are looked up
//! here, in /sys/kernel/btf/vmlinux, and set before loading, as tracefs offsets are.
//! Only what that needs is read: struct and union members, through anonymous members,
//! and the sizes of their types.

use anyhow::{bail, Context, Result};

const VMLINUX: &str = "/sys/kernel/btf/vmlinux";
const MAGIC: u16 = 0xeb9f;

// Kinds (include/uapi/linux/btf.h).
const INT: u32 = 1;
const PTR: u32 = 2;
const ARRAY: u32 = 3;
const STRUCT: u32 = 4;
const UNION: u32 = 5;
const ENUM: u32 = 6;
const TYPEDEF: u32 = 8;
const VOLATILE: u32 = 9;
const CONST: u32 = 10;
const RESTRICT: u32 = 11;
const FUNC_PROTO: u32 = 13;
const VAR: u32 = 14;
const DATASEC: u32 = 15;
const FLOAT: u32 = 16;
const DECL_TAG: u32 = 17;
const TYPE_TAG: u32 = 18;
const ENUM64: u32 = 19;

struct Type {
    name: u32,
    kind: u32,
    /// Bitfield offsets are encoded in members' offsets when set.
    kind_flag: bool,
    /// Size, or the referenced type's id, depending on the kind.
    size_or_type: u32,
    /// Byte range of the kind-specific data that follows the common part.
    extra: std::ops::Range<usize>,
}

/// A parsed BTF blob: types by id (id 0 is void) and the string table.
pub struct Btf {
    data: Vec<u8>,
    types: Vec<Type>,
    strings: std::ops::Range<usize>,
}

impl Btf {
    /// The running kernel's types.
    pub fn kernel() -> Result<Btf> {
        let data = std::fs::read(VMLINUX).with_context(|| {
            format!("this kernel exposes no type information ({VMLINUX}); the tracer needs a kernel built with CONFIG_DEBUG_INFO_BTF")
        })?;
        Btf::parse(data).with_context(|| format!("reading {VMLINUX}"))
    }

    pub fn parse(data: Vec<u8>) -> Result<Btf> {
        let u16_at = |o: usize| data.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        if u16_at(0) != Some(MAGIC) {
            bail!("not little-endian BTF");
        }
        let hdr = |i: usize| u32_at(&data, 4 + 4 * i).map(|v| v as usize);
        let (Some(hdr_len), Some(type_off), Some(type_len), Some(str_off), Some(str_len)) =
            (hdr(0), hdr(1), hdr(2), hdr(3), hdr(4))
        else {
            bail!("truncated BTF header");
        };
        let types_at = hdr_len + type_off;
        let strings = hdr_len + str_off..hdr_len + str_off + str_len;
        if types_at + type_len > data.len() || strings.end > data.len() {
            bail!("BTF sections run past the end of the data");
        }
        let mut types = vec![Type {
            name: 0,
            kind: 0,
            kind_flag: false,
            size_or_type: 0,
            extra: 0..0,
        }];
        let mut at = types_at;
        while at < types_at + type_len {
            let (Some(name), Some(info), Some(size_or_type)) = (
                u32_at(&data, at),
                u32_at(&data, at + 4),
                u32_at(&data, at + 8),
            ) else {
                bail!("truncated BTF type at byte {at}");
            };
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let extra_len = match kind {
                INT | VAR | DECL_TAG => 4,
                ARRAY => 12,
                STRUCT | UNION | DATASEC | ENUM64 => 12 * vlen,
                ENUM | FUNC_PROTO => 8 * vlen,
                _ => 0,
            };
            let start = at + 12;
            types.push(Type {
                name,
                kind,
                kind_flag: info >> 31 != 0,
                size_or_type,
                extra: start..start + extra_len,
            });
            at = start + extra_len;
        }
        if at != types_at + type_len || at > data.len() {
            bail!("BTF type section is malformed");
        }
        Ok(Btf {
            data,
            types,
            strings,
        })
    }

    fn name(&self, offset: u32) -> &[u8] {
        let s = &self.data[self.strings.clone()];
        let tail = s.get(offset as usize..).unwrap_or(&[]);
        &tail[..tail.iter().position(|&b| b == 0).unwrap_or(tail.len())]
    }

    /// Follows typedefs and qualifiers to the type they name.
    fn resolve(&self, mut id: u32) -> Option<&Type> {
        for _ in 0..32 {
            let t = self.types.get(id as usize)?;
            match t.kind {
                TYPEDEF | VOLATILE | CONST | RESTRICT | TYPE_TAG => id = t.size_or_type,
                _ => return Some(t),
            }
        }
        None
    }

    fn size(&self, id: u32) -> Option<u64> {
        let t = self.resolve(id)?;
        match t.kind {
            INT | STRUCT | UNION | ENUM | ENUM64 | FLOAT => Some(t.size_or_type as u64),
            PTR => Some(8),
            ARRAY => {
                let elem = u32_at(&self.data, t.extra.start)?;
                let n = u32_at(&self.data, t.extra.start + 8)? as u64;
                Some(self.size(elem)? * n)
            }
            _ => None,
        }
    }

    /// Members of a struct or union: (name, type id, bit offset).
    fn members(&self, t: &Type) -> impl Iterator<Item = (&[u8], u32, u32)> + '_ {
        let extra = if matches!(t.kind, STRUCT | UNION) {
            t.extra.clone()
        } else {
            0..0
        };
        let kind_flag = t.kind_flag;
        extra.step_by(12).filter_map(move |at| {
            let name = u32_at(&self.data, at)?;
            let ty = u32_at(&self.data, at + 4)?;
            let offset = u32_at(&self.data, at + 8)?;
            let bits = if kind_flag {
                offset & 0xff_ffff
            } else {
                offset
            };
            Some((self.name(name), ty, bits))
        })
    }

    /// Bit offset and type of member `name` of `t`, looking inside anonymous members.
    fn member(&self, t: &Type, name: &str, depth: u32) -> Option<(u32, u32)> {
        for (n, ty, bits) in self.members(t) {
            if n == name.as_bytes() {
                return Some((bits, ty));
            }
            if n.is_empty() && depth < 8 {
                let inner = self.resolve(ty)?;
                if let Some((b, ty)) = self.member(inner, name, depth + 1) {
                    return Some((bits + b, ty));
                }
            }
        }
        None
    }

    /// `sizeof(struct strukt)`.
    pub fn size_of(&self, strukt: &str) -> Result<u32> {
        let t = (self.types.iter())
            .position(|t| {
                t.kind == STRUCT && self.name(t.name) == strukt.as_bytes() && !t.extra.is_empty()
            })
            .with_context(|| format!("the kernel has no struct {strukt}"))?;
        let size = self.size(t as u32).context("a struct without a size")?;
        u32::try_from(size).context("a struct larger than 4 GiB")
    }

    /// Byte offset of `path` (members separated by dots, e.g. `se.sum_exec_runtime`) in
    /// `struct strukt`, checking that the field is `size` bytes long.
    pub fn offset(&self, strukt: &str, path: &str, size: u64) -> Result<u32> {
        let what = || format!("struct {strukt} member {path}");
        let mut t = self
            .types
            .iter()
            .find(|t| {
                t.kind == STRUCT && self.name(t.name) == strukt.as_bytes() && !t.extra.is_empty()
            })
            .with_context(|| format!("the kernel has no struct {strukt}"))?;
        let mut bits = 0;
        let mut last = 0;
        for name in path.split('.') {
            let (b, ty) = self
                .member(t, name, 0)
                .with_context(|| format!("{} not found in the kernel's types", what()))?;
            bits += b;
            last = ty;
            t = self.resolve(ty).with_context(what)?;
        }
        if bits % 8 != 0 {
            bail!("{} is a bitfield", what());
        }
        match self.size(last) {
            Some(s) if s == size => Ok(bits / 8),
            found => bail!("{} has size {found:?}, the programs expect {size}", what()),
        }
    }
}

fn u32_at(data: &[u8], o: usize) -> Option<u32> {
    data.get(o..o + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds BTF for:
    /// `struct inner { int a; u64 b; }`
    /// `struct outer { int x; union { long y; struct inner in; }; const struct inner z; }`
    fn sample() -> Vec<u8> {
        let strings = b"\0int\0long\0inner\0a\0b\0outer\0x\0y\0in\0z\0";
        let s = |name: &str| {
            let pat = format!("\0{name}\0");
            strings
                .windows(pat.len())
                .position(|w| w == pat.as_bytes())
                .unwrap() as u32
                + 1
        };
        let mut t: Vec<u32> = vec![];
        let ty = |t: &mut Vec<u32>, name: u32, kind: u32, vlen: u32, size: u32| {
            t.extend([name, kind << 24 | vlen, size]);
        };
        ty(&mut t, s("int"), INT, 0, 4); // 1
        t.push(32);
        ty(&mut t, s("long"), INT, 0, 8); // 2
        t.push(64);
        ty(&mut t, s("inner"), STRUCT, 2, 16); // 3
        t.extend([s("a"), 1, 0, s("b"), 2, 64]);
        ty(&mut t, 0, UNION, 2, 16); // 4
        t.extend([s("y"), 2, 0, s("in"), 3, 0]);
        ty(&mut t, 0, CONST, 0, 3); // 5
        ty(&mut t, s("outer"), STRUCT, 3, 48); // 6
        t.extend([s("x"), 1, 0, 0, 4, 64, s("z"), 5, 256]);
        let types: Vec<u8> = t.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = vec![0x9f, 0xeb, 1, 0];
        let hdr = [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ];
        out.extend(hdr.iter().flat_map(|v| v.to_le_bytes()));
        out.extend(types);
        out.extend(strings);
        out
    }

    #[test]
    fn finds_members_through_anonymous_unions_and_qualifiers() {
        let btf = Btf::parse(sample()).unwrap();
        assert_eq!(btf.offset("outer", "x", 4).unwrap(), 0);
        assert_eq!(btf.offset("outer", "y", 8).unwrap(), 8);
        assert_eq!(btf.offset("outer", "in.b", 8).unwrap(), 16);
        assert_eq!(btf.offset("outer", "z.b", 8).unwrap(), 40);
        assert_eq!(btf.offset("outer", "z", 16).unwrap(), 32);
        assert!(btf.offset("outer", "x", 8).is_err());
        assert!(btf.offset("outer", "nothing", 4).is_err());
        assert!(btf.offset("missing", "x", 4).is_err());
    }

    #[test]
    fn rejects_garbage() {
        assert!(Btf::parse(vec![1, 2, 3]).is_err());
        let mut bad = sample();
        bad.truncate(40);
        assert!(Btf::parse(bad).is_err());
    }

    #[test]
    fn reads_this_kernel() {
        // Every machine the tracer runs on has BTF; these are the fields it reads.
        let btf = Btf::kernel().unwrap();
        assert_eq!(btf.size_of("upid").unwrap(), 16);
        let pid = btf.offset("task_struct", "pid", 4).unwrap();
        let tgid = btf.offset("task_struct", "tgid", 4).unwrap();
        assert_eq!(tgid, pid + 4, "pid and tgid are neighbours in task_struct");
        assert_eq!(btf.offset("pt_regs", "r15", 8).unwrap(), 0);
        assert_eq!(btf.offset("pt_regs", "di", 8).unwrap(), 112);
    }
}
