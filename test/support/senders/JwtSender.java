import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.MessageDigest;
import java.security.PrivateKey;
import java.security.Signature;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import java.util.UUID;

/**
 * A JWT webhook sender on Java's own crypto and HTTP client, independent of jose and node:crypto
 * (test/ecosystem-senders.test.ts). Spec 5.2's claims; SHA256withECDSAinP1363Format gives the raw
 * r||s signature JWS wants, not DER. Arguments: the algorithm (RS256, ES256, EdDSA), the kid and
 * a PKCS#8 PEM file of the private key; the environment: URL (where to send), AUD (the endpoint
 * URL the service shows) and BODY. Sends the same signed request twice and prints each answer as
 * "<body> <status>".
 */
public class JwtSender {
  static String b64(byte[] bytes) {
    return Base64.getUrlEncoder().withoutPadding().encodeToString(bytes);
  }

  static String quoted(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  public static void main(String[] args) throws Exception {
    String alg = args[0], kid = args[1];
    String pem = Files.readString(Path.of(args[2])).replaceAll("-----[A-Z ]+-----|\\s", "");
    String[] names = switch (alg) {
      case "RS256" -> new String[] {"RSA", "SHA256withRSA"};
      case "ES256" -> new String[] {"EC", "SHA256withECDSAinP1363Format"};
      default -> new String[] {"Ed25519", "Ed25519"};
    };
    PrivateKey key = KeyFactory.getInstance(names[0]).generatePrivate(new PKCS8EncodedKeySpec(Base64.getDecoder().decode(pem)));
    byte[] body = System.getenv("BODY").getBytes(StandardCharsets.UTF_8);
    String url = System.getenv("URL"), aud = System.getenv("AUD");
    String id = UUID.randomUUID().toString();
    long now = System.currentTimeMillis() / 1000;
    String header = "{\"alg\":" + quoted(alg) + ",\"kid\":" + quoted(kid) + ",\"typ\":\"JWT\"}";
    String claims = "{\"sub\":" + quoted(aud.substring(0, aud.indexOf("/api/v1/")))
        + ",\"aud\":" + quoted(aud)
        + ",\"iat\":" + now + ",\"exp\":" + (now + 300)
        + ",\"jti\":" + quoted(id)
        + ",\"htm\":\"POST\""
        + ",\"htb_s256\":" + quoted(b64(MessageDigest.getInstance("SHA-256").digest(body))) + "}";
    String signingInput = b64(header.getBytes(StandardCharsets.UTF_8)) + "." + b64(claims.getBytes(StandardCharsets.UTF_8));
    Signature signer = Signature.getInstance(names[1]);
    signer.initSign(key);
    signer.update(signingInput.getBytes(StandardCharsets.US_ASCII));
    String jwt = signingInput + "." + b64(signer.sign());
    HttpClient client = HttpClient.newHttpClient();
    for (int i = 0; i < 2; i++) {
      HttpRequest request = HttpRequest.newBuilder(URI.create(url))
          .header("Content-Type", "application/json")
          .header("Authorization", "Bearer " + jwt)
          .header("Webhook-Timestamp", Long.toString(now))
          .header("Webhook-Event-Id", id)
          .POST(HttpRequest.BodyPublishers.ofByteArray(body))
          .build();
      HttpResponse<String> response = client.send(request, HttpResponse.BodyHandlers.ofString());
      System.out.println(response.body() + " " + response.statusCode());
    }
  }
}
