//! One desired object of any kind, in the form the apply takes it ([`Owned`]): what
//! [`Desired::objects`](super::Desired::objects) hands to the reconciler's one apply loop.
//! Pure: the apply itself ([`crate::objects::ensure`]), its skip rule and its hash annotation
//! live in `objects.rs`, which reads this type; nothing here reads `objects.rs`.

use kube::Resource;
use kube::api::{ApiResource, DynamicObject, TypeMeta};
use serde::Serialize;

/// One desired object of any kind, as [`ensure`](crate::objects::ensure) applies it: its API
/// resource and its body. The reconciler applies a list of them in order
/// (`builders::Desired::objects`).
#[derive(Debug, Clone)]
pub struct Owned {
    /// The kind, for logs and the write counter.
    pub kind: &'static str,
    pub resource: ApiResource,
    pub object: DynamicObject,
}

impl Owned {
    /// `typed` as an [`Owned`]; its JSON (and so its
    /// [`APPLIED_ANNOTATION`](crate::objects::APPLIED_ANNOTATION) hash) is the typed object's
    /// own.
    pub fn of<K>(typed: &K) -> Result<Self, serde_json::Error>
    where
        K: k8s_openapi::Resource + Resource<DynamicType = ()> + Serialize,
    {
        let mut object: DynamicObject = serde_json::from_value(serde_json::to_value(typed)?)?;
        // Required in an apply body; typed objects may leave them out.
        object.types = Some(TypeMeta {
            api_version: K::API_VERSION.to_owned(),
            kind: K::KIND.to_owned(),
        });
        Ok(Self {
            kind: K::KIND,
            resource: ApiResource::erase::<K>(&()),
            object,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owned_object_hashes_as_its_typed_self() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let typed = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("gw".into()),
                namespace: Some("ns".into()),
                labels: Some([("a".to_owned(), "1".to_owned())].into()),
                ..Default::default()
            },
            data: Some([("k".to_owned(), "v".to_owned())].into()),
            ..Default::default()
        };
        let owned = Owned::of(&typed).unwrap();
        assert_eq!(owned.kind, "ConfigMap");
        assert_eq!(owned.resource.plural, "configmaps");
        // The hash on every live object stays valid across the move to one apply loop.
        let typed_value = serde_json::to_value(&typed).unwrap();
        assert_eq!(typed_value["kind"], "ConfigMap");
        assert_eq!(serde_json::to_value(&owned.object).unwrap(), typed_value);
    }
}
