//! The fake libdcgm (`tests/fake-libdcgm`), loaded the way the exporter loads the real one: `dlopen` of
//! a file named `libdcgm.so.4` through `ffi::Symbols`, then the dcgm-exporter call sequence
//! (dcgm-abi.md §6.1) through the safe wrappers. Proves that the fake exports every required symbol with
//! the expected behaviour at the C boundary (version words, out-parameters, value unions, sentinels), and
//! that the wrappers marshal correctly. Everything runs in one test: the fake's engine is process-global.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use std::ffi::CString;
use std::path::PathBuf;

use crate::support::{fake_lib, own_process};
use dcgm_otel::source::dcgm::ffi::*;

/// `target/<profile>/libfake_libdcgm.so`, next to this test binary's `deps/` directory.
fn fake_library() -> PathBuf {
    fake_lib::built("libfake_libdcgm.so")
}

fn cs(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

fn read_log(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn exporter_call_sequence_against_the_fake() {
    own_process::run(
        concat!(module_path!(), "::exporter_call_sequence_against_the_fake"),
        exporter_call_sequence_against_the_fake_body,
    );
}

fn exporter_call_sequence_against_the_fake_body() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let link = tmp.path().join("libdcgm.so.4");
    std::os::unix::fs::symlink(fake_library(), &link).expect("symlink libdcgm.so.4");
    let log_path = tmp.path().join("calls.log");
    // Set before the first call into the library (the log is opened once).
    std::env::set_var("FAKE_DCGM_CALL_LOG", &log_path);
    std::env::set_var("FAKE_DCGM_SCENARIO", "default");
    std::env::remove_var("FAKE_DCGM_FAULTS");
    std::env::remove_var("FAKE_DCGM_PROFILING");

    let syms = Symbols::load(link.as_os_str()).expect("load the fake as libdcgm.so.4");
    assert!(syms.has("dcgmConnect_v3"));
    for name in REQUIRED_SYMBOLS.iter().chain(OPTIONAL_SYMBOLS) {
        assert!(syms.has(name), "{name}");
    }

    // Before dcgmInit.
    let mut h: dcgmHandle_t = 0;
    assert_eq!(
        syms.start_embedded(DCGM_OPERATION_MODE_AUTO, &mut h),
        DCGM_ST_UNINITIALIZED
    );
    assert!(syms.field_get_by_id(150).is_none());

    assert_eq!(syms.init(), DCGM_ST_OK);
    assert_eq!(syms.init(), DCGM_ST_OK, "idempotent");

    // Embedded start through _v2 with a v1 params struct (the wrapper writes the version word).
    let mut p = dcgmStartEmbeddedV2Params_v1::zeroed();
    p.opMode = DCGM_OPERATION_MODE_AUTO;
    assert_eq!(syms.start_embedded_v2(&mut p, None), DCGM_ST_OK);
    assert_eq!(p.version, dcgmStartEmbeddedV2Params_version1);
    assert_eq!(p.dcgmHandle, DCGM_EMBEDDED_HANDLE);
    let h = p.dcgmHandle;

    // Discovery.
    let mut ids = [0u32; DCGM_MAX_NUM_DEVICES];
    let mut n = 0;
    assert_eq!(
        syms.get_all_supported_devices(h, &mut ids, &mut n),
        DCGM_ST_OK
    );
    assert_eq!(&ids[..n as usize], &[0, 1]);

    let mut attr = dcgmDeviceAttributes_v3::boxed_zeroed();
    assert_eq!(
        syms.get_device_attributes(h, 0, &mut attr),
        DCGM_ST_VER_MISMATCH
    );
    attr.version = dcgmDeviceAttributes_version3;
    assert_eq!(syms.get_device_attributes(h, 0, &mut attr), DCGM_ST_OK);
    let uuid = chars_to_string(&attr.identifiers.uuid);
    assert!(uuid.starts_with("GPU-"), "{uuid}");
    assert_eq!(
        chars_to_string(&attr.identifiers.deviceName),
        "NVIDIA H100 80GB HBM3"
    );
    assert_eq!(
        chars_to_string(&attr.identifiers.pciBusId),
        "00000000:18:00.0"
    );
    assert_eq!(
        syms.get_device_attributes(h, 7, &mut attr),
        DCGM_ST_BADPARAM
    );

    let mut hier = dcgmMigHierarchy_v2::boxed_zeroed();
    hier.version = dcgmMigHierarchy_version2;
    assert_eq!(syms.get_gpu_instance_hierarchy(h, &mut hier), DCGM_ST_OK);
    let rows = &hier.entityList[..hier.count as usize];
    let gis: Vec<u32> = rows
        .iter()
        .filter(|r| r.entity.entityGroupId == DCGM_FE_GPU_I)
        .map(|r| r.entity.entityId)
        .collect();
    assert_eq!(gis.len(), 3);
    assert!(rows
        .iter()
        .filter(|r| r.entity.entityGroupId == DCGM_FE_GPU_I)
        .all(|r| r.parent
            == dcgmGroupEntityPair_t {
                entityGroupId: DCGM_FE_GPU,
                entityId: 1
            }));

    // MIG profile names with LIVE_DATA (no watch needed), answers matched by ids.
    let pairs: Vec<dcgmGroupEntityPair_t> = gis
        .iter()
        .map(|&id| dcgmGroupEntityPair_t {
            entityGroupId: DCGM_FE_GPU_I,
            entityId: id,
        })
        .collect();
    let mut out = vec![dcgmFieldValue_v2::zeroed(); pairs.len()];
    assert_eq!(
        syms.entities_get_latest_values(h, &pairs, &[50], DCGM_FV_FLAG_LIVE_DATA, &mut out),
        DCGM_ST_OK
    );
    let mut names: Vec<String> = out.iter().map(|v| v.value.as_string()).collect();
    names.sort();
    assert_eq!(names, ["1g.10gb", "2g.20gb", "3g.40gb"]);
    assert!(out
        .iter()
        .all(|v| v.version == dcgmFieldValue_version2 && v.status == DCGM_ST_OK));

    let mut links = dcgmNvLinkStatus_v5::boxed_zeroed();
    links.version = dcgmNvLinkStatus_version5;
    assert_eq!(syms.get_nvlink_link_status(h, &mut *links), DCGM_ST_OK);
    assert_eq!(links.numGpus, 2);
    assert_eq!(links.gpus[0].linkState[0], DcgmNvLinkLinkStateUp);
    let mut links4 = dcgmNvLinkStatus_v4::boxed_zeroed();
    links4.version = dcgmNvLinkStatus_version4;
    assert_eq!(syms.get_nvlink_link_status(h, &mut *links4), DCGM_ST_OK);

    let mut prof = dcgmProfGetMetricGroups_v3::boxed_zeroed();
    prof.version = dcgmProfGetMetricGroups_version3;
    assert_eq!(
        syms.prof_get_supported_metric_groups(h, &mut prof),
        DCGM_ST_OK
    );
    assert!(prof.numMetricGroups >= 1);

    let meta = syms
        .field_get_by_id(155)
        .expect("metadata of DCGM_FI_DEV_POWER_USAGE");
    assert_eq!(meta.fieldType as u8, DCGM_FT_DOUBLE);
    assert_eq!(meta.entityLevel, DCGM_FE_GPU);
    assert!(syms.field_get_by_id(0).is_none());
    assert_eq!(
        syms.error_string(DCGM_ST_CONNECTION_NOT_VALID).as_deref(),
        Some("Host engine connection invalid/disconnected")
    );
    assert_eq!(syms.error_string(-9999), None);

    // Groups, field group, watch, first sample.
    let mut g = 0;
    assert_eq!(
        syms.group_create(h, DCGM_GROUP_EMPTY, &cs("gpus"), &mut g),
        DCGM_ST_OK
    );
    assert_eq!(g, 2);
    for gpu in [0, 1] {
        assert_eq!(syms.group_add_entity(h, g, DCGM_FE_GPU, gpu), DCGM_ST_OK);
    }
    let link_raw = DCGM_FE_GPU | (2 << 8) | (1 << 24);
    assert_eq!(
        syms.group_add_entity(h, g, DCGM_FE_LINK, link_raw),
        DCGM_ST_OK
    );
    let mut fg = 0;
    let fields = [150u16, 155, 156, 54];
    assert_eq!(
        syms.field_group_create(h, &fields, &cs("basic"), &mut fg),
        DCGM_ST_OK
    );
    assert_eq!(
        syms.field_group_create(h, &fields, &cs("basic"), &mut fg),
        DCGM_ST_DUPLICATE_KEY
    );
    let mut out1 = vec![dcgmFieldValue_v1::zeroed(); fields.len()];
    assert_eq!(
        syms.entity_get_latest_values(h, DCGM_FE_GPU, 0, &fields, &mut out1),
        DCGM_ST_OK
    );
    assert_eq!(out1[0].status, DCGM_ST_NOT_WATCHED);
    assert_eq!(out1[0].value.as_i64(), DCGM_INT64_BLANK);
    assert_eq!(
        syms.watch_fields(h, 0, fg, 1_000_000, 600.0, 0),
        DCGM_ST_BADPARAM
    );
    assert_eq!(syms.watch_fields(h, g, fg, 1_000_000, 600.0, 0), DCGM_ST_OK);
    assert_eq!(syms.update_all_fields(h, true), DCGM_ST_OK);

    // Two poll cycles: energy grows, types and order as documented.
    let mut energy = Vec::new();
    for _ in 0..2 {
        assert_eq!(
            syms.entity_get_latest_values(h, DCGM_FE_GPU, 0, &fields, &mut out1),
            DCGM_ST_OK
        );
        assert!(out1.iter().all(|v| v.status == DCGM_ST_OK), "all watched");
        assert_eq!(out1[0].fieldId, 150);
        assert_eq!(out1[0].fieldType, u16::from(DCGM_FT_INT64));
        assert_eq!(out1[1].fieldType, u16::from(DCGM_FT_DOUBLE));
        assert!(out1[1].value.as_f64() > 50.0, "H100 power in W");
        assert_eq!(out1[3].value.as_string(), uuid);
        energy.push(out1[2].value.as_i64());
    }
    assert!(energy[1] > energy[0], "energy counter grows: {energy:?}");

    let ents = [
        dcgmGroupEntityPair_t {
            entityGroupId: DCGM_FE_GPU,
            entityId: 0,
        },
        dcgmGroupEntityPair_t {
            entityGroupId: DCGM_FE_GPU,
            entityId: 1,
        },
    ];
    let mut out2 = vec![dcgmFieldValue_v2::zeroed(); 4];
    assert_eq!(
        syms.entities_get_latest_values(h, &ents, &[150, 155], 0, &mut out2),
        DCGM_ST_OK
    );
    let got: Vec<(u32, u16)> = out2.iter().map(|v| (v.entityId, v.fieldId)).collect();
    assert_eq!(got, [(0, 150), (1, 150), (0, 155), (1, 155)], "field-major");
    let too_small = &mut out2[..3];
    assert_eq!(
        syms.entities_get_latest_values(h, &ents, &[150, 155], 0, too_small),
        DCGM_ST_BADPARAM,
        "the wrapper refuses a short buffer"
    );

    // Tear down, then nothing works until init again.
    assert_eq!(syms.field_group_destroy(h, fg), DCGM_ST_OK);
    assert_eq!(syms.group_destroy(h, g), DCGM_ST_OK);
    assert_eq!(syms.group_destroy(h, g), DCGM_ST_NOT_CONFIGURED);
    assert_eq!(syms.stop_embedded(h), DCGM_ST_OK);
    assert_eq!(syms.shutdown(), DCGM_ST_OK);
    assert_eq!(syms.update_all_fields(h, true), DCGM_ST_UNINITIALIZED);

    // Faults: remote connect refused once, then host-engine loss after the second poll.
    std::env::set_var(
        "FAKE_DCGM_FAULTS",
        "refuse_connect=1,disconnect_after_polls=2,down_ms=0,blank_field=150",
    );
    std::env::set_var("FAKE_DCGM_PROFILING", "off");
    assert_eq!(syms.init(), DCGM_ST_OK);
    let mut params = dcgmConnectV2Params_v2 {
        version: dcgmConnectV2Params_version2,
        ..Default::default()
    };
    let mut h = 0;
    let addr = cs("127.0.0.1:5555");
    assert_eq!(
        syms.connect_v2(&addr, &mut params, &mut h),
        DCGM_ST_CONNECTION_NOT_VALID
    );
    assert_eq!(syms.connect_v2(&addr, &mut params, &mut h), DCGM_ST_OK);
    assert_eq!(
        syms.prof_get_supported_metric_groups(h, &mut prof),
        DCGM_ST_MODULE_NOT_LOADED
    );
    let mut g = 0;
    assert_eq!(
        syms.group_create(h, DCGM_GROUP_DEFAULT, &cs("all"), &mut g),
        DCGM_ST_OK
    );
    let mut dcp = 0;
    assert_eq!(
        syms.field_group_create(h, &[1002], &cs("dcp"), &mut dcp),
        DCGM_ST_OK
    );
    assert_eq!(
        syms.watch_fields(h, g, dcp, 1_000_000, 600.0, 0),
        DCGM_ST_MODULE_NOT_LOADED
    );
    let mut fg = 0;
    assert_eq!(
        syms.field_group_create(h, &[150, 155], &cs("b"), &mut fg),
        DCGM_ST_OK
    );
    assert_eq!(syms.watch_fields(h, g, fg, 1_000_000, 600.0, 0), DCGM_ST_OK);
    assert_eq!(syms.update_all_fields(h, true), DCGM_ST_OK);
    let mut out1 = vec![dcgmFieldValue_v1::zeroed(); 3];
    for poll in 1..=2 {
        assert_eq!(
            syms.entity_get_latest_values(h, DCGM_FE_GPU, 0, &[150, 155, 1002], &mut out1),
            DCGM_ST_OK,
            "poll {poll}"
        );
        assert_eq!(out1[0].status, DCGM_ST_OK);
        assert_eq!(out1[0].value.as_i64(), DCGM_INT64_BLANK, "blank_field=150");
        assert_eq!(out1[2].status, DCGM_ST_NOT_SUPPORTED, "profiling off");
    }
    assert_eq!(
        syms.entity_get_latest_values(h, DCGM_FE_GPU, 0, &[155], &mut out1),
        DCGM_ST_CONNECTION_NOT_VALID
    );
    assert_eq!(syms.disconnect(h), DCGM_ST_CONNECTION_NOT_VALID);
    let mut h2 = 0;
    assert_eq!(syms.connect_v2(&addr, &mut params, &mut h2), DCGM_ST_OK);
    assert_ne!(h2, h);
    assert_eq!(
        syms.watch_fields(h2, g, fg, 1_000_000, 600.0, 0),
        DCGM_ST_NOT_CONFIGURED,
        "groups did not survive the host engine"
    );
    assert_eq!(syms.disconnect(h2), DCGM_ST_OK);
    assert_eq!(syms.shutdown(), DCGM_ST_OK);

    let log = read_log(&log_path);
    assert_eq!(
        log.first().map(String::as_str),
        Some("dcgmStartEmbedded mode=1 handle=0 rc=-10")
    );
    assert!(log
        .iter()
        .any(|l| l == "dcgmWatchFields group=2 fieldGroup=4 freq=1000000 maxKeepAge=600 maxKeepSamples=0 handle=2147483647 rc=0"),
        "{log:#?}");
    assert!(log
        .iter()
        .any(|l| l == "dcgmConnect_v2 address=127.0.0.1:5555 unix=0 handle=0 rc=-21"));
    assert_eq!(log.last().map(String::as_str), Some("dcgmShutdown rc=0"));
}

/// A field watched at 100 ms beside its 1 s watch: `dcgmGetValuesSince_v2` hands every sample of the
/// poll cycle in one batch per (entity, field), in time order, 100 ms apart, with the scenario's
/// square wave (high for the first 200 ms of every 400 ms: 650 W at 100 ms, 250 W at 200 and 300 ms,
/// …); the cursor it returns asks for nothing twice.
#[test]
fn sampled_history_through_values_since() {
    own_process::run(
        concat!(module_path!(), "::sampled_history_through_values_since"),
        sampled_history_through_values_since_body,
    );
}

/// (field id, field type, status, timestamp, value as double) of one sample.
type SampleView = (u16, u16, i32, i64, f64);

fn sampled_history_through_values_since_body() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let link = tmp.path().join("libdcgm.so.4");
    std::os::unix::fs::symlink(fake_library(), &link).expect("symlink libdcgm.so.4");
    let scenario = crate::support::common::fixtures_path("scenarios/power-square-wave-1gpu.yaml");
    std::env::set_var("FAKE_DCGM_SCENARIO", &scenario);
    std::env::remove_var("FAKE_DCGM_FAULTS");
    std::env::remove_var("FAKE_DCGM_CALL_LOG");
    let syms = Symbols::load(link.as_os_str()).expect("load the fake as libdcgm.so.4");
    assert_eq!(syms.init(), DCGM_ST_OK);
    let mut h: dcgmHandle_t = 0;
    assert_eq!(
        syms.start_embedded(DCGM_OPERATION_MODE_AUTO, &mut h),
        DCGM_ST_OK
    );
    let (mut g, mut regular, mut sampled) = (0, 0, 0);
    assert_eq!(
        syms.group_create(h, DCGM_GROUP_EMPTY, &cs("gpus"), &mut g),
        DCGM_ST_OK
    );
    assert_eq!(syms.group_add_entity(h, g, DCGM_FE_GPU, 0), DCGM_ST_OK);
    assert_eq!(
        syms.field_group_create(h, &[155, 150], &cs("regular"), &mut regular),
        DCGM_ST_OK
    );
    assert_eq!(
        syms.field_group_create(h, &[155], &cs("sampled"), &mut sampled),
        DCGM_ST_OK
    );
    assert_eq!(
        syms.watch_fields(h, g, regular, 1_000_000, 600.0, 0),
        DCGM_ST_OK
    );
    // Not watched yet: no history to read.
    let mut next = 0i64;
    let mut none = |_: u32, _: u32, _: &[dcgmFieldValue_v1]| {};
    assert_eq!(
        syms.get_values_since_batches(h, g, sampled, 0, &mut next, &mut none),
        DCGM_ST_NOT_WATCHED
    );
    assert_eq!(
        syms.watch_fields(h, g, sampled, 100_000, 3.0, 31),
        DCGM_ST_OK
    );
    assert_eq!(syms.update_all_fields(h, true), DCGM_ST_OK);
    // Two polls of the regular fields: one second of the engine's time.
    let mut out = vec![dcgmFieldValue_v1::zeroed(); 2];
    for _ in 0..2 {
        assert_eq!(
            syms.entity_get_latest_values(h, DCGM_FE_GPU, 0, &[155, 150], &mut out),
            DCGM_ST_OK
        );
    }
    let latest = out[0].value.as_f64();
    assert!(latest == 250.0 || latest == 650.0, "{latest}");
    let mut batches: Vec<(u32, u32, Vec<SampleView>)> = Vec::new();
    let mut take = |group: u32, id: u32, values: &[dcgmFieldValue_v1]| {
        let vs = values
            .iter()
            .map(|v| (v.fieldId, v.fieldType, v.status, v.ts, v.value.as_f64()))
            .collect();
        batches.push((group, id, vs));
    };
    assert_eq!(
        syms.get_values_since_batches(h, g, sampled, 0, &mut next, &mut take),
        DCGM_ST_OK
    );
    assert_eq!(batches.len(), 1, "one (entity, field) batch");
    let (group, id, values) = &batches[0];
    assert_eq!((*group, *id), (DCGM_FE_GPU, 0));
    assert_eq!(values.len(), 10, "{values:?}");
    let levels: Vec<f64> = values.iter().map(|v| v.4).collect();
    assert_eq!(
        levels,
        [650.0, 250.0, 250.0, 650.0, 650.0, 250.0, 250.0, 650.0, 650.0, 250.0]
    );
    for w in values.windows(2) {
        assert_eq!(w[1].3 - w[0].3, 100_000, "{values:?}");
    }
    assert!(values
        .iter()
        .all(|v| (v.0, v.1, v.2) == (155, u16::from(DCGM_FT_DOUBLE), DCGM_ST_OK)));
    assert_eq!(values[9].4, latest, "the newest sample is the latest value");
    assert_eq!(next, values[9].3 + 1);
    // From the returned cursor: nothing again.
    let before = next;
    let mut count = 0;
    let mut counting = |_: u32, _: u32, v: &[dcgmFieldValue_v1]| count += v.len();
    assert_eq!(
        syms.get_values_since_batches(h, g, sampled, before, &mut next, &mut counting),
        DCGM_ST_OK
    );
    assert_eq!((count, next), (0, before));
    assert_eq!(syms.stop_embedded(h), DCGM_ST_OK);
    assert_eq!(syms.shutdown(), DCGM_ST_OK);
}
