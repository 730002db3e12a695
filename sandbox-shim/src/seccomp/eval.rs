//! A classic-BPF interpreter for the few instructions the filter uses, so the
//! filter's decisions can be tested without installing it (seccomp(2)
//! describes the program's input, `struct seccomp_data`).

use super::{
    AUDIT_ARCH, BPF_AND_K, BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K, BPF_LD_W_ABS, BPF_RET_K, OFF_ARCH,
    OFF_NR,
};

/// One system call as the filter sees it (native architecture).
pub(crate) struct Call {
    pub nr: libc::c_long,
    pub args: [u64; 6],
}

impl Call {
    pub(crate) fn new(nr: libc::c_long, args: &[u64]) -> Self {
        let mut all = [0u64; 6];
        all[..args.len()].copy_from_slice(args);
        Self { nr, args: all }
    }

    /// The 32-bit word at `offset` of `struct seccomp_data` (little endian).
    fn word(&self, offset: u32) -> u32 {
        match offset {
            OFF_NR => self.nr as u32,
            OFF_ARCH => AUDIT_ARCH,
            o if (16..64).contains(&o) && o % 4 == 0 => {
                let arg = self.args[((o - 16) / 8) as usize];
                if (o - 16) % 8 == 0 {
                    arg as u32
                } else {
                    (arg >> 32) as u32
                }
            }
            o => panic!("the filter reads seccomp_data at {o}"),
        }
    }
}

/// The filter's verdict (SECCOMP_RET_*) for `call`.
pub(crate) fn run(prog: &[libc::sock_filter], call: &Call) -> u32 {
    let (mut pc, mut a) = (0usize, 0u32);
    loop {
        let insn = prog[pc];
        let taken = |cond: bool| pc + 1 + usize::from(if cond { insn.jt } else { insn.jf });
        pc = match insn.code {
            BPF_LD_W_ABS => {
                a = call.word(insn.k);
                pc + 1
            }
            BPF_AND_K => {
                a &= insn.k;
                pc + 1
            }
            BPF_JEQ_K => taken(a == insn.k),
            BPF_JGE_K => taken(a >= insn.k),
            BPF_JSET_K => taken(a & insn.k != 0),
            BPF_RET_K => return insn.k,
            code => panic!("unexpected BPF instruction {code:#x} at {pc}"),
        };
    }
}
