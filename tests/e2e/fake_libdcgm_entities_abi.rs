//! The fake libdcgm's NvSwitch and CPU side at the C boundary, through the exporter's own
//! `ffi::Symbols`: `dcgmGetEntityGroupEntities` for switches, CPUs and cores, the switch part of
//! `dcgmGetNvLinkLinkStatus` (v4 and v5), `dcgmGetCpuHierarchy` (v1) and `_v2` (with serials) and their
//! version checks, packed switch-link entity ids, and the bind/unbind event field. Each test in a
//! process of its own (`support::own_process`: the fake's engine is process-global and reads its
//! environment at `dcgmInit`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use std::path::PathBuf;

use crate::support::{fake_lib, own_process};
use dcgm_otel::source::dcgm::ffi::*;

fn load(scenario: &str) -> (tempfile::TempDir, Symbols, dcgmHandle_t) {
    let so = fake_lib::built("libfake_libdcgm.so");
    let tmp = tempfile::tempdir().unwrap();
    let link: PathBuf = tmp.path().join("libdcgm.so.4");
    std::os::unix::fs::symlink(&so, &link).unwrap();
    std::env::set_var("FAKE_DCGM_SCENARIO", scenario);
    std::env::remove_var("FAKE_DCGM_FAULTS");
    let syms = Symbols::load(link.as_os_str()).unwrap();
    assert!(syms.has("dcgmGetCpuHierarchy") && syms.has("dcgmGetCpuHierarchy_v2"));
    assert_eq!(syms.init(), DCGM_ST_OK);
    let mut h: dcgmHandle_t = 0;
    assert_eq!(
        syms.start_embedded(DCGM_OPERATION_MODE_AUTO, &mut h),
        DCGM_ST_OK
    );
    (tmp, syms, h)
}

fn entities(syms: &Symbols, h: dcgmHandle_t, group: u32) -> Vec<u32> {
    let mut ids = vec![0u32; 2048];
    let mut n = 0;
    assert_eq!(
        syms.get_entity_group_entities(h, group, &mut ids, &mut n, 0),
        DCGM_ST_OK
    );
    ids.truncate(n as usize);
    ids
}

#[test]
fn switches_and_their_links() {
    own_process::run(
        concat!(module_path!(), "::switches_and_their_links"),
        switches_and_their_links_body,
    );
}

fn switches_and_their_links_body() {
    let (_tmp, syms, h) = load("hgx-h100");
    assert_eq!(entities(&syms, h, DCGM_FE_SWITCH), [0, 1, 2, 3]);
    let mut v5 = dcgmNvLinkStatus_v5::boxed_zeroed();
    assert_eq!(syms.get_nvlink_link_status(h, &mut *v5), DCGM_ST_OK);
    assert_eq!((v5.numGpus, v5.numNvSwitches), (8, 4));
    let s3 = &v5.nvSwitches[3];
    assert_eq!(s3.entityId, 3);
    assert!(s3.linkState[..18]
        .iter()
        .all(|s| *s == DcgmNvLinkLinkStateUp));
    assert!(s3.linkState[18..]
        .iter()
        .all(|s| *s == DcgmNvLinkLinkStateNotSupported));
    let mut v4 = dcgmNvLinkStatus_v4::boxed_zeroed();
    assert_eq!(syms.get_nvlink_link_status(h, &mut *v4), DCGM_ST_OK);
    assert_eq!((v4.numNvSwitches, v4.nvSwitches[1].entityId), (4, 1));

    // Values of a switch and of port 17 of switch 3 (packed dcgm_link_t), watched in one group.
    let mut g: dcgmGpuGrp_t = 0;
    let name = std::ffi::CString::new("sw").unwrap();
    assert_eq!(
        syms.group_create(h, DCGM_GROUP_EMPTY, &name, &mut g),
        DCGM_ST_OK
    );
    let port = DCGM_FE_SWITCH | (17 << 8) | (3 << 24);
    assert_eq!(syms.group_add_entity(h, g, DCGM_FE_SWITCH, 3), DCGM_ST_OK);
    assert_eq!(syms.group_add_entity(h, g, DCGM_FE_LINK, port), DCGM_ST_OK);
    // Port 18 is not up: not an entity.
    assert_ne!(
        syms.group_add_entity(h, g, DCGM_FE_LINK, DCGM_FE_SWITCH | (18 << 8) | (3 << 24)),
        DCGM_ST_OK
    );
    let mut fg: dcgmFieldGrp_t = 0;
    let fname = std::ffi::CString::new("swf").unwrap();
    assert_eq!(
        syms.field_group_create(h, &[858, 780], &fname, &mut fg),
        DCGM_ST_OK
    );
    assert_eq!(syms.watch_fields(h, g, fg, 1_000_000, 600.0, 0), DCGM_ST_OK);
    assert_eq!(syms.update_all_fields(h, true), DCGM_ST_OK);
    let pairs = [
        dcgmGroupEntityPair_t {
            entityGroupId: DCGM_FE_SWITCH,
            entityId: 3,
        },
        dcgmGroupEntityPair_t {
            entityGroupId: DCGM_FE_LINK,
            entityId: port,
        },
    ];
    let mut out = vec![dcgmFieldValue_v2::zeroed(); 4];
    assert_eq!(
        syms.entities_get_latest_values(h, &pairs, &[858, 780], 0, &mut out),
        DCGM_ST_OK
    );
    let get = |group: u32, field: u16| {
        out.iter()
            .find(|v| v.entityGroupId == group && v.fieldId == field)
            .map(|v| (v.status, v.value.as_i64()))
            .unwrap()
    };
    // The switch temperature; switch-level fields do not exist on a port (NOT_SUPPORTED sentinel).
    let (st, temp) = get(DCGM_FE_SWITCH, 858);
    assert_eq!(st, DCGM_ST_OK);
    assert!((30..60).contains(&temp), "{temp}");
    assert_eq!(
        get(DCGM_FE_LINK, 858),
        (DCGM_ST_OK, DCGM_INT64_NOT_SUPPORTED)
    );
    assert_eq!(get(DCGM_FE_LINK, 780).0, DCGM_ST_OK);
}

#[test]
fn cpus_cores_and_their_hierarchy() {
    own_process::run(
        concat!(module_path!(), "::cpus_cores_and_their_hierarchy"),
        cpus_cores_and_their_hierarchy_body,
    );
}

fn cpus_cores_and_their_hierarchy_body() {
    let (_tmp, syms, h) = load("grace-hopper");
    assert_eq!(entities(&syms, h, DCGM_FE_CPU), [0, 1]);
    let cores = entities(&syms, h, DCGM_FE_CPU_CORE);
    assert_eq!(cores.len(), 144);
    assert_eq!((cores[0], cores[143]), (0, 143));

    let mut v1 = dcgmCpuHierarchy_v1::boxed_zeroed();
    v1.version = dcgmCpuHierarchy_version1;
    assert_eq!(syms.get_cpu_hierarchy(h, &mut v1), DCGM_ST_OK);
    assert_eq!(v1.numCpus, 2);
    let c1 = &v1.cpus[1];
    assert_eq!(c1.cpuId, 1);
    assert_eq!(c1.ownedCores.version, dcgmCpuHierarchyOwnedCores_version1);
    // Cores 72..=143: bits 8..64 of word 1 (cores 64..128) and bits 0..16 of word 2.
    assert_eq!(c1.ownedCores.bitmask[0], 0);
    assert_eq!(c1.ownedCores.bitmask[1], !0u64 << 8);
    assert_eq!(c1.ownedCores.bitmask[2], 0xffff);
    assert_eq!(c1.ownedCores.bitmask[3], 0);

    let mut v2 = dcgmCpuHierarchy_v2::boxed_zeroed();
    v2.version = dcgmCpuHierarchy_version2;
    assert_eq!(syms.get_cpu_hierarchy_v2(h, &mut v2), DCGM_ST_OK);
    assert_eq!(v2.numCpus, 2);
    assert_eq!(chars_to_string(&v2.cpus[0].serial).len(), 16);
    assert_eq!(v2.cpus[0].ownedCores.bitmask[1], (1u64 << 8) - 1);

    // A v2 struct handed to the v1 call (and the reverse) is refused, the buffer untouched.
    let mut wrong = dcgmCpuHierarchy_v1::boxed_zeroed();
    wrong.version = dcgmCpuHierarchy_version2;
    assert_eq!(syms.get_cpu_hierarchy(h, &mut wrong), DCGM_ST_VER_MISMATCH);
    assert_eq!(wrong.numCpus, 0);
    let mut wrong = dcgmCpuHierarchy_v2::boxed_zeroed();
    wrong.version = dcgmCpuHierarchy_version1;
    assert_eq!(
        syms.get_cpu_hierarchy_v2(h, &mut wrong),
        DCGM_ST_VER_MISMATCH
    );
}
