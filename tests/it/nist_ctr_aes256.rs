//! The AES-256-CTR keystream equals NIST SP 800-38A, F.5.5 (CTR-AES256.Encrypt).

use walcrypt::Key;
use walcrypt::inspect::ctr_apply_keystream;

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s.split_whitespace().collect::<String>()).unwrap()
}

#[test]
fn sp800_38a_f5_5_ctr_aes256_encrypt() {
    let key: [u8; 32] = unhex("603deb1015ca71be2b73aef0857d7781 1f352c073b6108d72d9810a30914dff4")
        .try_into()
        .unwrap();
    let iv: [u8; 16] = unhex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")
        .try_into()
        .unwrap();
    let plaintext = unhex(
        "6bc1bee22e409f96e93d7e117393172a ae2d8a571e03ac9c9eb76fac45af8e51
         30c81c46a35ce411e5fbc1191a0a52ef f69f2445df4f9b17ad2b417be66c3710",
    );
    let ciphertext = unhex(
        "601ec313775789a5b7a7f504bbf3d228 f443e3ca4d62b59aca84e990cacaf5c5
         2b0930daa23de94ce87017ba2d84988d dfc9c58db67aada613c2dd08457941a6",
    );
    let key = Key::from_bytes(key);
    let mut data = plaintext.clone();
    ctr_apply_keystream(&key, &iv, &mut data);
    assert_eq!(data, ciphertext);
    // CTR is its own inverse.
    ctr_apply_keystream(&key, &iv, &mut data);
    assert_eq!(data, plaintext);
    // The counter carries across all 128 bits: the second block uses ...ff00 with carry.
    let mut second = plaintext[16..32].to_vec();
    let mut iv2 = iv;
    iv2[15] = 0x00;
    iv2[14] = 0xff;
    ctr_apply_keystream(&key, &iv2, &mut second);
    assert_eq!(second, ciphertext[16..32]);
}
