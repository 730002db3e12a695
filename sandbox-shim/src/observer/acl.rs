//! POSIX ACLs as the kernel stores them in `system.posix_acl_access` and
//! `system.posix_acl_default` (include/uapi/linux/posix_acl_xattr.h): a
//! little-endian u32 version (2), then 8-byte entries {u16 tag, u16 perm,
//! u32 id}. Decoded here into the short text form of acl(5) ("user::rwx,
//! user:1000:rwx, mask::rwx, other::---"), so the record says what a
//! permission change granted without a reader decoding bytes.

/// The attribute names that hold POSIX ACLs.
pub(super) const ACCESS: &str = "system.posix_acl_access";
pub(super) const DEFAULT: &str = "system.posix_acl_default";

const VERSION: u32 = 2;
const ENTRY: usize = 8;

/// Is `name` one of the ACL attributes (a permission change)?
pub(super) fn is_acl(name: &[u8]) -> bool {
    name == ACCESS.as_bytes() || name == DEFAULT.as_bytes()
}

fn perms(p: u16) -> String {
    let bit = |mask: u16, c: char| if p & mask != 0 { c } else { '-' };
    [bit(4, 'r'), bit(2, 'w'), bit(1, 'x')].iter().collect()
}

/// The entries of an ACL value, e.g. "user::rwx, user:1000:rwx, group::---,
/// mask::rwx, other::---"; None when the bytes are not an ACL of version 2.
pub(super) fn describe(value: &[u8]) -> Option<String> {
    let (head, body) = value.split_at_checked(4)?;
    if u32::from_le_bytes(head.try_into().ok()?) != VERSION || body.len() % ENTRY != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() / ENTRY);
    for e in body.chunks_exact(ENTRY) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = perms(u16::from_le_bytes([e[2], e[3]]));
        let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        out.push(match tag {
            0x01 => format!("user::{perm}"),
            0x02 => format!("user:{id}:{perm}"),
            0x04 => format!("group::{perm}"),
            0x08 => format!("group:{id}:{perm}"),
            0x10 => format!("mask::{perm}"),
            0x20 => format!("other::{perm}"),
            // An unknown tag is shown rather than hidden.
            t => format!("tag {t:#x}:{id}:{perm}"),
        });
    }
    Some(out.join(", "))
}

#[cfg(test)]
mod tests {
    fn entry(tag: u16, perm: u16, id: u32) -> Vec<u8> {
        let mut e = tag.to_le_bytes().to_vec();
        e.extend(perm.to_le_bytes());
        e.extend(id.to_le_bytes());
        e
    }

    #[test]
    fn an_acl_granting_a_user_reads_as_its_entries() {
        let mut v = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [
            (0x01, 7, u32::MAX),
            (0x02, 7, 1000),
            (0x04, 0, u32::MAX),
            (0x08, 5, 50),
            (0x10, 7, u32::MAX),
            (0x20, 4, u32::MAX),
        ] {
            v.extend(entry(tag, perm, id));
        }
        assert_eq!(
            super::describe(&v).as_deref(),
            Some("user::rwx, user:1000:rwx, group::---, group:50:r-x, mask::rwx, other::r--")
        );
    }

    #[test]
    fn what_is_not_an_acl_is_not_described() {
        assert_eq!(super::describe(b""), None);
        assert_eq!(super::describe(b"\x01\0\0\0"), None);
        assert_eq!(super::describe(b"\x02\0\0\0\x01\0"), None);
        assert_eq!(super::describe(b"\x02\0\0\0").as_deref(), Some(""));
    }
}
