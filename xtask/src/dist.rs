//! `cargo xtask dist`: fully static, stripped `orderly` binaries for x86_64 and aarch64 Linux (musl), packaged with a SHA-256 file.
//!
//! Both targets link with `rust-lld`, which rustup ships with every toolchain (`.cargo/config.toml`
//! names it), and musl's C runtime objects come with the targets' `rust-std` component, so no C
//! compiler or cross toolchain is involved. The `dist` profile is the release profile with symbols
//! stripped. Every binary is checked to be static (ELF program headers: no interpreter, no dynamic
//! section) before it is packaged.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The targets `cargo xtask dist` builds by default.
pub const TARGETS: &[&str] = &["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"];

/// The cargo profile of distribution builds (see the root `Cargo.toml`).
pub const PROFILE: &str = "dist";

/// The version in the archive names: the workspace version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// One packaged target.
#[derive(Debug)]
pub struct Artifact {
    /// The target triple.
    pub target: String,
    /// The stripped binary in `target/<triple>/dist/`.
    pub binary: PathBuf,
    /// `dist/orderly-<version>-<target>.tar.gz`.
    pub archive: PathBuf,
    /// The archive's SHA-256 file (`sha256sum -c` reads it).
    pub sha256_file: PathBuf,
    /// The archive's SHA-256, hex.
    pub sha256: String,
}

/// Builds, checks and packages `targets` (all of [`TARGETS`] when empty) into `root/dist/`.
pub fn run(root: &Path, targets: &[String]) -> Result<Vec<Artifact>> {
    let targets: Vec<String> = if targets.is_empty() {
        TARGETS.iter().map(|t| (*t).to_string()).collect()
    } else {
        targets.to_vec()
    };
    ensure_targets(&targets)?;
    let out_dir = root.join("dist");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut artifacts = Vec::new();
    for target in &targets {
        let binary = build(root, target)?;
        check_static(&binary)?;
        let file_says = describe_with_file(&binary);
        let archive = package(root, &out_dir, target, &binary)?;
        let sha256 = sha256_hex(&archive)?;
        let sha256_file = PathBuf::from(format!("{}.sha256", archive.display()));
        let archive_name = archive
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        std::fs::write(&sha256_file, format!("{sha256}  {archive_name}\n"))
            .with_context(|| format!("writing {}", sha256_file.display()))?;
        let bin_size = std::fs::metadata(&binary)?.len();
        let archive_size = std::fs::metadata(&archive)?.len();
        eprintln!("==> {target}");
        eprintln!("    binary   {} ({})", binary.display(), human(bin_size));
        if let Some(desc) = file_says {
            eprintln!("    file(1): {desc}");
        }
        eprintln!(
            "    archive  {} ({})",
            archive.display(),
            human(archive_size)
        );
        eprintln!("    sha256   {sha256}");
        artifacts.push(Artifact {
            target: target.clone(),
            binary,
            archive,
            sha256_file,
            sha256,
        });
    }
    Ok(artifacts)
}

/// Installs the rustup targets that are missing (as a new user would: `rustup target add`).
pub fn ensure_targets(targets: &[String]) -> Result<()> {
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context(
            "running `rustup target list --installed` (rustup is needed for the musl targets)",
        )?;
    if !out.status.success() {
        bail!(
            "rustup target list failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let installed = String::from_utf8_lossy(&out.stdout);
    let missing: Vec<&String> = targets
        .iter()
        .filter(|t| !installed.lines().any(|l| l.trim() == t.as_str()))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("==> rustup target add {missing:?}");
    let status = Command::new("rustup")
        .arg("target")
        .arg("add")
        .args(&missing)
        .status()
        .context("running rustup target add")?;
    if !status.success() {
        bail!("rustup target add {missing:?} failed ({status})");
    }
    Ok(())
}

/// `cargo build --profile dist --target <target> -p orderly-cli`; returns the binary's path.
pub fn build(root: &Path, target: &str) -> Result<PathBuf> {
    eprintln!("==> cargo build --locked --profile {PROFILE} --target {target} -p orderly-cli");
    let status = build_command(root, target)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("building orderly for {target} failed ({status})");
    }
    Ok(binary_path(root, target))
}

/// The `cargo build` command [`build`] runs, for a caller that directs its output.
pub fn build_command(root: &Path, target: &str) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root)
        .args([
            "build",
            "--locked",
            "--profile",
            PROFILE,
            "--target",
            target,
        ])
        .args(["-p", "orderly-cli", "--bin", "orderly"]);
    cmd
}

/// Where [`build`] leaves the binary for `target`.
pub fn binary_path(root: &Path, target: &str) -> PathBuf {
    crate::target_dir(root)
        .join(target)
        .join(PROFILE)
        .join("orderly")
}

/// Fails unless `binary` is a statically linked ELF executable: no `PT_INTERP` (no dynamic loader)
/// and no `PT_DYNAMIC` (no shared libraries, no relocations left to a loader).
pub fn check_static(binary: &Path) -> Result<()> {
    let bytes = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let kinds = elf_program_header_types(&bytes).with_context(|| {
        format!(
            "{} is not a 64-bit little-endian ELF file",
            binary.display()
        )
    })?;
    const PT_DYNAMIC: u32 = 2;
    const PT_INTERP: u32 = 3;
    if kinds.contains(&PT_INTERP) {
        bail!(
            "{} asks for a dynamic loader (PT_INTERP): not static",
            binary.display()
        );
    }
    if kinds.contains(&PT_DYNAMIC) {
        bail!(
            "{} has a dynamic section (PT_DYNAMIC): not a plain static executable",
            binary.display()
        );
    }
    Ok(())
}

/// The `p_type` of every program header of a 64-bit little-endian ELF file.
fn elf_program_header_types(b: &[u8]) -> Option<Vec<u32>> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    (0..phnum).map(|i| u32_at(phoff + i * phentsize)).collect()
}

/// What `file(1)` says about `binary`, if `file` is installed; an error when it is installed and
/// does not say "statically linked" is left to the caller's check above (the ELF check decides).
fn describe_with_file(binary: &Path) -> Option<String> {
    let out = Command::new("file").arg("-b").arg(binary).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Writes `dist/orderly-<version>-<target>.tar.gz` holding `orderly-<version>-<target>/` with the
/// binary, the README and the licence note. The archive is reproducible: sorted names, owner 0,
/// the last commit's time (or 0) as every file's time, and no name or time in the gzip header.
fn package(root: &Path, out_dir: &Path, target: &str, binary: &Path) -> Result<PathBuf> {
    let name = format!("orderly-{VERSION}-{target}");
    let stage = out_dir.join(&name);
    if stage.exists() {
        std::fs::remove_dir_all(&stage)?;
    }
    std::fs::create_dir_all(&stage)?;
    std::fs::copy(binary, stage.join("orderly"))
        .with_context(|| format!("copying {}", binary.display()))?;
    std::fs::copy(root.join("README.md"), stage.join("README.md"))?;
    let mtime = last_commit_time(root).unwrap_or(0);
    let archive = out_dir.join(format!("{name}.tar.gz"));
    let tar = Command::new("tar")
        .current_dir(out_dir)
        .args([
            "--sort=name",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--format=gnu",
        ])
        .arg(format!("--mtime=@{mtime}"))
        .args(["-cf", "-", &name])
        .output()
        .context("running tar")?;
    if !tar.status.success() {
        bail!("tar failed: {}", String::from_utf8_lossy(&tar.stderr));
    }
    let gz = gzip(&tar.stdout)?;
    std::fs::write(&archive, gz).with_context(|| format!("writing {}", archive.display()))?;
    std::fs::remove_dir_all(&stage)?;
    Ok(archive)
}

/// `gzip -n -9` of `data` (no name, no time stamp).
fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    let mut child = Command::new("gzip")
        .args(["-n", "-9", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("running gzip")?;
    let mut stdin = child.stdin.take().context("gzip stdin")?;
    let input = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("gzip writer thread panicked"))??;
    if !out.status.success() {
        bail!("gzip failed ({})", out.status);
    }
    Ok(out.stdout)
}

/// Seconds since the epoch of the last commit, for reproducible archive times.
fn last_commit_time(root: &Path) -> Option<u64> {
    let out = Command::new("git")
        .current_dir(root)
        .args(["log", "-1", "--format=%ct"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// SHA-256 of a file, with coreutils' `sha256sum`.
fn sha256_hex(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .context("running sha256sum")?;
    if !out.status.success() {
        bail!("sha256sum failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.split_whitespace().next().unwrap_or_default();
    if hex.len() != 64 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        bail!("sha256sum printed {text:?}");
    }
    Ok(hex.to_string())
}

/// Bytes as MiB with two decimals, plus the exact count.
pub fn human(bytes: u64) -> String {
    // Sizes of binaries fit f64's 53-bit mantissa exactly.
    #[allow(clippy::cast_precision_loss)]
    let mib = bytes as f64 / (1024.0 * 1024.0);
    format!("{mib:.2} MiB, {bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal 64-bit little-endian ELF header with the given program header types.
    fn elf(types: &[u32]) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&u16::try_from(types.len()).unwrap().to_le_bytes());
        for t in types {
            let mut ph = vec![0u8; 56];
            ph[..4].copy_from_slice(&t.to_le_bytes());
            b.extend(ph);
        }
        b
    }

    #[test]
    fn program_header_types_are_read() {
        assert_eq!(
            elf_program_header_types(&elf(&[6, 1, 3, 2])),
            Some(vec![6, 1, 3, 2])
        );
        assert_eq!(elf_program_header_types(b"not an elf file at all"), None);
        // Truncated program headers are not silently accepted.
        let mut cut = elf(&[1, 1]);
        cut.truncate(64 + 56 + 2);
        assert_eq!(elf_program_header_types(&cut), None);
    }

    #[test]
    fn a_dynamic_binary_is_rejected_and_a_static_one_accepted() {
        let dir = std::env::temp_dir().join(format!("orderly-dist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let check = |name: &str, types: &[u32]| {
            let p = dir.join(name);
            std::fs::write(&p, elf(types)).unwrap();
            check_static(&p)
        };
        let r_static = check("static", &[6, 1, 1, 7]);
        let r_interp = check("interp", &[6, 3, 1, 2]);
        let r_dynamic = check("dynamic", &[6, 1, 2]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(r_static.is_ok(), "{r_static:?}");
        assert!(format!("{:?}", r_interp.unwrap_err()).contains("PT_INTERP"));
        assert!(format!("{:?}", r_dynamic.unwrap_err()).contains("PT_DYNAMIC"));
    }
}
