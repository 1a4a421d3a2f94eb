//! The flattened device tree U-Boot hands the arm64 restorer (the EFI configuration table's
//! device tree), read for what the image kernel saw of the machine when U-Boot booted it:
//! its RAM (`/memory` nodes, less the `no-map` reservations the kernel does not count as
//! System RAM), what it reserves (`/memreserve/` and `/reserved-memory`'s children, as
//! `devsys::devicetree` reads them on the device), its CPUs (`/cpus/cpu@*`'s MPIDRs), how
//! PSCI is called to start and stop them (`/psci`'s `method`) and the console's UART
//! (`/chosen`'s `stdout-path`).
//!
//! A walk of the structure block with bounds checked at every step: nothing here can panic
//! on a damaged blob (a general parser crate panicked on the tree QEMU's `virt` machine and
//! U-Boot produce; see `devsys::devicetree`).

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use snapimg::PhysRange;

const MAGIC: u32 = 0xd00d_feed;
const BEGIN_NODE: u32 = 1;
const END_NODE: u32 = 2;
const PROP: u32 = 3;
const NOP: u32 = 4;
const END: u32 = 9;
/// Most nodes read (a board's tree has a few hundred).
const MAX_NODES: usize = 4096;

/// Why the blob cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FdtError {
    /// Not a device tree.
    #[error("not a device tree blob (magic {0:#x})")]
    Magic(u32),
    /// A structure that runs off the blob or is malformed.
    #[error("the device tree blob ({len} bytes) is damaged at byte {at}: {why}")]
    Damaged {
        /// Blob size.
        len: usize,
        /// Where.
        at: usize,
        /// What was wrong.
        why: &'static str,
    },
    /// More nodes than the reader keeps.
    #[error("the device tree has more than {MAX_NODES} nodes")]
    TooLarge,
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// One node: its full path and its properties' names and values.
#[derive(Debug, Clone)]
pub struct Node<'a> {
    /// `/`, `/memory@40000000`, `/reserved-memory/foo@...`.
    pub path: String,
    /// `(name, value)`.
    pub props: Vec<(&'a str, &'a [u8])>,
}

impl<'a> Node<'a> {
    /// A property's value.
    pub fn prop(&self, name: &str) -> Option<&'a [u8]> {
        self.props.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// The node's name (the last path component).
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or("")
    }

    /// The path of its parent (`/` for a child of the root).
    pub fn parent(&self) -> &str {
        match self.path.rfind('/') {
            Some(0) | None => "/",
            Some(i) => &self.path[..i],
        }
    }

    fn cells(&self, name: &str, default: usize) -> usize {
        self.prop(name)
            .and_then(|v| be32(v, 0))
            .map_or(default, |v| v as usize)
    }
}

/// A parsed device tree.
#[derive(Debug, Clone)]
pub struct Fdt<'a> {
    /// Every node, in the blob's order.
    pub nodes: Vec<Node<'a>>,
    /// `/memreserve/` entries.
    pub memreserve: Vec<PhysRange>,
}

fn cstr(b: &[u8], at: usize) -> Option<&str> {
    let rest = b.get(at..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    core::str::from_utf8(&rest[..end]).ok()
}

impl<'a> Fdt<'a> {
    /// Reads the blob.
    pub fn parse(blob: &'a [u8]) -> Result<Self, FdtError> {
        let len = blob.len();
        let damaged = |at: usize, why: &'static str| FdtError::Damaged { len, at, why };
        let magic = be32(blob, 0).ok_or(damaged(0, "shorter than its header"))?;
        if magic != MAGIC {
            return Err(FdtError::Magic(magic));
        }
        let total = be32(blob, 4).ok_or(damaged(4, "no size"))? as usize;
        if total > len {
            return Err(damaged(4, "its header's size is larger than the blob"));
        }
        let blob = &blob[..total];
        let off_struct = be32(blob, 8).ok_or(damaged(8, "header"))? as usize;
        let off_strings = be32(blob, 12).ok_or(damaged(12, "header"))? as usize;
        let off_rsv = be32(blob, 16).ok_or(damaged(16, "header"))? as usize;
        let mut memreserve = Vec::new();
        let mut at = off_rsv;
        loop {
            let (base, size) = match (be64(blob, at), be64(blob, at + 8)) {
                (Some(b), Some(s)) => (b, s),
                _ => return Err(damaged(at, "the reservation block runs off the blob")),
            };
            if base == 0 && size == 0 {
                break;
            }
            memreserve.push(PhysRange { base, size });
            at += 16;
        }
        let mut nodes: Vec<Node<'a>> = Vec::new();
        // Indices into `nodes` of the open nodes, outermost first.
        let mut open: Vec<usize> = Vec::new();
        let mut at = off_struct;
        loop {
            let token = be32(blob, at).ok_or(damaged(at, "the structure runs off the blob"))?;
            at += 4;
            match token {
                BEGIN_NODE => {
                    let name = cstr(blob, at).ok_or(damaged(at, "a node name is not text"))?;
                    at = (at + name.len() + 1).next_multiple_of(4);
                    if nodes.len() >= MAX_NODES {
                        return Err(FdtError::TooLarge);
                    }
                    let path = match open.last() {
                        None => "/".to_string(),
                        Some(&p) if nodes[p].path == "/" => alloc::format!("/{name}"),
                        Some(&p) => alloc::format!("{}/{name}", nodes[p].path),
                    };
                    nodes.push(Node {
                        path,
                        props: Vec::new(),
                    });
                    open.push(nodes.len() - 1);
                }
                END_NODE => {
                    if open.pop().is_none() {
                        return Err(damaged(at - 4, "a node ends that never began"));
                    }
                }
                PROP => {
                    let vlen = be32(blob, at).ok_or(damaged(at, "a property runs off"))? as usize;
                    let nameoff =
                        be32(blob, at + 4).ok_or(damaged(at, "a property runs off"))? as usize;
                    let start = at + 8;
                    let value = blob
                        .get(start..start.checked_add(vlen).ok_or(damaged(at, "size"))?)
                        .ok_or(damaged(at, "a property's value runs off the blob"))?;
                    let name = off_strings
                        .checked_add(nameoff)
                        .and_then(|o| cstr(blob, o))
                        .ok_or(damaged(at, "a property's name is not in the strings"))?;
                    let &node = open
                        .last()
                        .ok_or(damaged(at, "a property outside every node"))?;
                    nodes[node].props.push((name, value));
                    at = (start + vlen).next_multiple_of(4);
                }
                NOP => {}
                END => break,
                _ => return Err(damaged(at - 4, "an unknown token")),
            }
        }
        Ok(Fdt { nodes, memreserve })
    }

    /// The node at `path`.
    pub fn node(&self, path: &str) -> Option<&Node<'a>> {
        self.nodes.iter().find(|n| n.path == path)
    }

    /// The `reg` ranges of `node`, sized by its parent's cell counts.
    pub fn reg(&self, node: &Node<'a>) -> Vec<PhysRange> {
        let parent = self.node(node.parent());
        let (ac, sc) = parent.map_or((2, 1), |p| {
            (p.cells("#address-cells", 2), p.cells("#size-cells", 1))
        });
        let Some(reg) = node.prop("reg") else {
            return Vec::new();
        };
        let entry = 4 * (ac + sc);
        if entry == 0 || ac > 2 || sc > 2 {
            return Vec::new();
        }
        let value = |b: &[u8], cells: usize| match cells {
            0 => Some(0),
            1 => be32(b, 0).map(u64::from),
            _ => be64(b, 0),
        };
        reg.chunks_exact(entry)
            .filter_map(|e| {
                Some(PhysRange {
                    base: value(e, ac)?,
                    size: value(&e[4 * ac..], sc)?,
                })
            })
            .collect()
    }

    /// What the image kernel saw of the machine.
    pub fn machine(&self) -> Machine {
        let mut ram: Vec<PhysRange> = Vec::new();
        for n in self.nodes.iter().filter(|n| n.parent() == "/") {
            let is_memory = n.prop("device_type") == Some(b"memory\0")
                || n.name() == "memory"
                || n.name().starts_with("memory@");
            if is_memory {
                ram.extend(self.reg(n).into_iter().filter(|r| r.size > 0));
            }
        }
        let mut reserved = self.memreserve.clone();
        let mut no_map = Vec::new();
        for n in self
            .nodes
            .iter()
            .filter(|n| n.parent() == "/reserved-memory")
        {
            let regs = self.reg(n);
            if n.prop("no-map").is_some() {
                no_map.extend(regs.iter().copied());
            }
            reserved.extend(regs);
        }
        let cpus = self
            .nodes
            .iter()
            .filter(|n| n.parent() == "/cpus" && n.name().starts_with("cpu@"))
            .filter_map(|n| self.reg(n).first().map(|r| r.base))
            .collect();
        Machine {
            ram: subtract(ram, &no_map),
            reserved,
            cpus,
            uart: self.stdout_uart(),
            gic: self.gic(),
            psci: self.psci(),
            uboot: self
                .node("/chosen")
                .and_then(|c| c.prop("u-boot,version"))
                .and_then(|v| core::str::from_utf8(v).ok())
                .map(|v| v.trim_end_matches('\0').to_string()),
        }
    }

    /// How `/psci` says its functions are called; `None` without the node or a method.
    fn psci(&self) -> Option<PsciMethod> {
        match self.node("/psci")?.prop("method")? {
            b"hvc\0" | b"hvc" => Some(PsciMethod::Hvc),
            b"smc\0" | b"smc" => Some(PsciMethod::Smc),
            _ => None,
        }
    }

    /// The interrupt controller's generation, from the first node compatible with a GIC.
    fn gic(&self) -> Option<Gic> {
        const V3: &[&[u8]] = &[b"arm,gic-v3"];
        const V2: &[&[u8]] = &[
            b"arm,gic-400",
            b"arm,cortex-a15-gic",
            b"arm,cortex-a9-gic",
            b"arm,cortex-a7-gic",
            b"arm,arm11mp-gic",
        ];
        self.nodes.iter().find_map(|n| {
            let compatible = n.prop("compatible")?;
            let has = |list: &[&[u8]]| compatible.split(|&b| b == 0).any(|c| list.contains(&c));
            if has(V3) {
                Some(Gic::V3)
            } else if has(V2) {
                Some(Gic::V2)
            } else {
                None
            }
        })
    }

    /// The console: `/chosen`'s `stdout-path` (a path or an alias, options after `:`), as
    /// a PL011's registers' address.
    fn stdout_uart(&self) -> Option<Uart> {
        let chosen = self.node("/chosen")?;
        let raw = chosen.prop("stdout-path")?;
        let text = core::str::from_utf8(raw).ok()?.trim_end_matches('\0');
        let name = text.split(':').next()?;
        let path = if name.starts_with('/') {
            name.to_string()
        } else {
            let aliases = self.node("/aliases")?;
            let v = aliases.prop(name)?;
            core::str::from_utf8(v)
                .ok()?
                .trim_end_matches('\0')
                .to_string()
        };
        let node = self.node(&path)?;
        let compatible = node.prop("compatible").unwrap_or(&[]);
        let pl011 = compatible.split(|&b| b == 0).any(|c| c == b"arm,pl011");
        let base = self.reg(node).first()?.base;
        pl011.then_some(Uart::Pl011(base))
    }
}

/// The generation of the machine's interrupt controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gic {
    /// GICv2 (GIC-400 and the like): the image kernel's CPU-PM notifiers write its
    /// distributor and CPU interface back after a restore.
    V2,
    /// GICv3 or later: nothing in the stock kernel restores its distributor, redistributors
    /// or ITS after a restore no kernel came before.
    V3,
}

/// The instruction PSCI (the firmware's or the hypervisor's CPU power interface) is
/// called with: `/psci`'s `method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PsciMethod {
    /// `hvc`: QEMU's `virt` board without EL2, or a hypervisor.
    Hvc,
    /// `smc`: the secure firmware (or QEMU's board with EL2 and no EL3).
    Smc,
}

/// The console a device tree names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uart {
    /// An ARM PL011 at this address.
    Pl011(u64),
}

/// What the image kernel saw of the machine (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// RAM the kernel counts as System RAM, sorted.
    pub ram: Vec<PhysRange>,
    /// `/memreserve/` and `/reserved-memory`'s children.
    pub reserved: Vec<PhysRange>,
    /// The CPUs' MPIDRs.
    pub cpus: Vec<u64>,
    /// The console.
    pub uart: Option<Uart>,
    /// The interrupt controller (`None`: no GIC the reader knows).
    pub gic: Option<Gic>,
    /// How PSCI is called (`None`: no `/psci` node with a method this reader knows).
    pub psci: Option<PsciMethod>,
    /// `/chosen`'s `u-boot,version`: U-Boot wrote this tree.
    pub uboot: Option<String>,
}

/// `ram` less every range of `holes`, sorted.
fn subtract(mut ram: Vec<PhysRange>, holes: &[PhysRange]) -> Vec<PhysRange> {
    for h in holes {
        let (hs, he) = (h.base, h.base.saturating_add(h.size));
        ram = ram
            .into_iter()
            .flat_map(|r| {
                let (s, e) = (r.base, r.base.saturating_add(r.size));
                let mut out = Vec::new();
                if he <= s || hs >= e {
                    out.push(r);
                } else {
                    if hs > s {
                        out.push(PhysRange {
                            base: s,
                            size: hs - s,
                        });
                    }
                    if he < e {
                        out.push(PhysRange {
                            base: he,
                            size: e - he,
                        });
                    }
                }
                out
            })
            .collect();
    }
    ram.sort();
    ram
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small blob builder: nodes as (depth-first) begin/prop/end tokens.
    struct Blob {
        structs: Vec<u8>,
        strings: Vec<u8>,
    }

    impl Blob {
        fn new() -> Self {
            Blob {
                structs: Vec::new(),
                strings: Vec::new(),
            }
        }
        fn u32(&mut self, v: u32) {
            self.structs.extend_from_slice(&v.to_be_bytes());
        }
        fn begin(&mut self, name: &str) -> &mut Self {
            self.u32(BEGIN_NODE);
            self.structs.extend_from_slice(name.as_bytes());
            self.structs.push(0);
            while !self.structs.len().is_multiple_of(4) {
                self.structs.push(0);
            }
            self
        }
        fn end(&mut self) -> &mut Self {
            self.u32(END_NODE);
            self
        }
        fn prop(&mut self, name: &str, value: &[u8]) -> &mut Self {
            let off = self.strings.len() as u32;
            self.strings.extend_from_slice(name.as_bytes());
            self.strings.push(0);
            self.u32(PROP);
            self.u32(value.len() as u32);
            self.u32(off);
            self.structs.extend_from_slice(value);
            while !self.structs.len().is_multiple_of(4) {
                self.structs.push(0);
            }
            self
        }
        fn finish(&mut self, rsv: &[(u64, u64)]) -> Vec<u8> {
            self.u32(END);
            let mut out = Vec::new();
            let off_rsv = 40u32;
            let rsv_len = 16 * (rsv.len() as u32 + 1);
            let off_struct = off_rsv + rsv_len;
            let off_strings = off_struct + self.structs.len() as u32;
            let total = off_strings + self.strings.len() as u32;
            for v in [
                MAGIC,
                total,
                off_struct,
                off_strings,
                off_rsv,
                17,
                16,
                0,
                0,
                0,
            ] {
                out.extend_from_slice(&v.to_be_bytes());
            }
            for (b, s) in rsv.iter().chain(core::iter::once(&(0, 0))) {
                out.extend_from_slice(&b.to_be_bytes());
                out.extend_from_slice(&s.to_be_bytes());
            }
            out.extend_from_slice(&self.structs);
            out.extend_from_slice(&self.strings);
            out
        }
    }

    fn cells(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|c| c.to_be_bytes()).collect()
    }

    fn virt_like() -> Vec<u8> {
        let mut b = Blob::new();
        b.begin("")
            .prop("#address-cells", &cells(&[2]))
            .prop("#size-cells", &cells(&[2]));
        b.begin("memory@40000000")
            .prop("device_type", b"memory\0")
            .prop("reg", &cells(&[0, 0x4000_0000, 0, 0x2000_0000]))
            .end();
        b.begin("reserved-memory")
            .prop("#address-cells", &cells(&[2]))
            .prop("#size-cells", &cells(&[2]));
        b.begin("tz@5e000000")
            .prop("reg", &cells(&[0, 0x5e00_0000, 0, 0x10_0000]))
            .prop("no-map", b"")
            .end();
        b.begin("cma")
            .prop("reg", &cells(&[0, 0x5000_0000, 0, 0x100_0000]))
            .end();
        b.end();
        b.begin("cpus")
            .prop("#address-cells", &cells(&[1]))
            .prop("#size-cells", &cells(&[0]));
        b.begin("cpu@0").prop("reg", &cells(&[0])).end();
        b.begin("cpu@1").prop("reg", &cells(&[1])).end();
        b.end();
        b.begin("pl011@9000000")
            .prop("compatible", b"arm,pl011\0arm,primecell\0")
            .prop("reg", &cells(&[0, 0x900_0000, 0, 0x1000]))
            .end();
        b.begin("intc@8000000")
            .prop("compatible", b"arm,cortex-a15-gic\0")
            .end();
        b.begin("psci")
            .prop("compatible", b"arm,psci-1.0\0arm,psci-0.2\0arm,psci\0")
            .prop("method", b"hvc\0")
            .end();
        b.begin("chosen")
            .prop("stdout-path", b"/pl011@9000000\0")
            .prop("u-boot,version", b"2023.01+dfsg-2+deb12u3\0")
            .end();
        b.end();
        b.finish(&[(0x4800_0000, 0x1000)])
    }

    #[test]
    fn a_virt_like_tree_gives_its_ram_reservations_cpus_and_console() {
        let blob = virt_like();
        let m = Fdt::parse(&blob).unwrap().machine();
        assert_eq!(
            m.ram,
            vec![
                PhysRange {
                    base: 0x4000_0000,
                    size: 0x1e00_0000
                },
                PhysRange {
                    base: 0x5e10_0000,
                    size: 0x1f0_0000
                }
            ]
        );
        assert_eq!(
            m.reserved,
            vec![
                PhysRange {
                    base: 0x4800_0000,
                    size: 0x1000
                },
                PhysRange {
                    base: 0x5e00_0000,
                    size: 0x10_0000
                },
                PhysRange {
                    base: 0x5000_0000,
                    size: 0x100_0000
                }
            ]
        );
        assert_eq!(m.cpus, vec![0, 1]);
        assert_eq!(m.uart, Some(Uart::Pl011(0x900_0000)));
        assert_eq!(m.gic, Some(Gic::V2));
        assert_eq!(m.psci, Some(PsciMethod::Hvc));
        assert_eq!(m.uboot.as_deref(), Some("2023.01+dfsg-2+deb12u3"));
    }

    #[test]
    fn damaged_blobs_are_refused_without_panicking() {
        let blob = virt_like();
        assert!(Fdt::parse(&blob[..3])
            .unwrap_err()
            .to_string()
            .contains("header"));
        assert!(matches!(Fdt::parse(&[0u8; 64]), Err(FdtError::Magic(0))));
        for cut in (40..blob.len()).step_by(7) {
            let mut b = blob[..cut].to_vec();
            b[4..8].copy_from_slice(&(cut as u32).to_be_bytes());
            let _ = Fdt::parse(&b);
        }
        let mut flipped = blob.clone();
        for i in (40..flipped.len()).step_by(5) {
            flipped[i] ^= 0xff;
            let _ = Fdt::parse(&flipped);
        }
    }
}
