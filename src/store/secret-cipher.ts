import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";

const ivBytes = 12;
const tagBytes = 16;

/**
 * AES-256-GCM for secrets at rest (webhook secrets, the token signing keys) under the data key.
 * The sealed form is iv || tag || ciphertext; the associated data binds a ciphertext to the row it
 * belongs to, so a sealed secret copied onto another row does not open.
 */
export class SecretCipher {
  constructor(private readonly key: Buffer) {
    if (key.length !== 32) throw new Error("the data key must be 32 bytes");
  }

  seal(plaintext: Buffer, associatedData: string): Buffer {
    const iv = randomBytes(ivBytes);
    const cipher = createCipheriv("aes-256-gcm", this.key, iv);
    cipher.setAAD(Buffer.from(associatedData, "utf8"));
    const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()]);
    return Buffer.concat([iv, cipher.getAuthTag(), ciphertext]);
  }

  /** True when `sealed` opens with this key (it was sealed under it, with this associated data, and not altered). */
  opens(sealed: Buffer, associatedData: string): boolean {
    try {
      this.open(sealed, associatedData);
      return true;
    } catch {
      return false;
    }
  }

  /** Throws when the data was sealed under another key or altered. */
  open(sealed: Buffer, associatedData: string): Buffer {
    const iv = sealed.subarray(0, ivBytes);
    const tag = sealed.subarray(ivBytes, ivBytes + tagBytes);
    const decipher = createDecipheriv("aes-256-gcm", this.key, iv);
    decipher.setAAD(Buffer.from(associatedData, "utf8"));
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(sealed.subarray(ivBytes + tagBytes)), decipher.final()]);
  }
}
