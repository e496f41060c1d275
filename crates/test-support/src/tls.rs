//! A test certificate authority and a server certificate it signed, for
//! TLS receivers and proxies on loopback: the server side as a rustls
//! configuration (ALPN offering h2 and http/1.1), and the CA's PEM for
//! whatever must trust it (`GORGE_WEBHOOK_CA_FILE`, a transport's extra
//! roots).

use std::net::IpAddr;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// A test CA and a server certificate it signed.
#[derive(Debug)]
pub struct TestPki {
    /// The CA's certificate, PEM.
    pub ca_pem: String,
    /// The server side, with the signed certificate.
    pub server: Arc<rustls::ServerConfig>,
}

/// A certificate for the host names `names`.
pub fn test_pki(names: &[&str]) -> TestPki {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    signed(CertificateParams::new(names).expect("leaf params"))
}

/// A certificate for the address `ip`.
pub fn test_pki_for_ip(ip: IpAddr) -> TestPki {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("leaf params");
    params.subject_alt_names = vec![SanType::IpAddress(ip)];
    signed(params)
}

fn signed(mut leaf_params: CertificateParams) -> TestPki {
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "gorge-webhook test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf_key = KeyPair::generate().expect("leaf key");
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "receiver");
    let leaf_cert = leaf_params
        .signed_by(&leaf_key, &issuer)
        .expect("leaf cert");

    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let mut server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![leaf_cert.der().clone()], key)
    .expect("server config");
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    TestPki {
        ca_pem: ca_cert.pem(),
        server: Arc::new(server),
    }
}
