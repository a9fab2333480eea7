//! The kubelet pod-resources `List` reply (protobuf bytes as the gRPC client receives them), decoded and
//! indexed into the GPU → pod mapping with both device-id conventions: no panic, and never more pods
//! holding a device than pods in the reply.
#![no_main]
use dcgm_otel::enrich::kubernetes::mapping::{GpuIdType, Mapping, MatchRules};
use dcgm_otel::enrich::kubernetes::podresources::ListPodResourcesResponse;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(reply) = ListPodResourcesResponse::decode(data) else {
        return;
    };
    for id_type in [GpuIdType::Uid, GpuIdType::DeviceName] {
        let rules = MatchRules {
            extra_resource_names: vec!["example.com/gpu".into()],
            id_type,
        };
        let m = Mapping::build(&reply, &rules, None);
        assert!(m.pods <= reply.pod_resources.len());
        let _ = m.pods().count();
    }
});
