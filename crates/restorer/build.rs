//! Rebuilds the restorer's programs when a linker script changes: they are link arguments
//! cargo does not see (scripts/restorer.sh passes them), so an edit would otherwise leave
//! a program linked by the old one.
fn main() {
    println!("cargo:rerun-if-changed=link.ld");
    println!("cargo:rerun-if-changed=link-efi.ld");
}
