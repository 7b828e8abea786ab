import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.UUID;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * An HMAC webhook sender on Java's own crypto and HTTP client (test/ecosystem-senders.test.ts).
 * The client by default asks a plain-HTTP server to upgrade to HTTP/2 (Connection: Upgrade,
 * HTTP2-Settings; Upgrade: h2c). The environment: URL, WHSECRET and BODY. Sends the same signed
 * request twice and prints each answer as "<body> <status>".
 */
public class HmacSender {
  public static void main(String[] args) throws Exception {
    String body = System.getenv("BODY");
    String ts = Long.toString(System.currentTimeMillis() / 1000);
    String id = UUID.randomUUID().toString();
    Mac mac = Mac.getInstance("HmacSHA256");
    mac.init(new SecretKeySpec(System.getenv("WHSECRET").getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
    byte[] signed = mac.doFinal((ts + "." + id + "." + body).getBytes(StandardCharsets.UTF_8));
    String signature = Base64.getUrlEncoder().withoutPadding().encodeToString(signed);
    HttpClient client = HttpClient.newHttpClient();
    for (int i = 0; i < 2; i++) {
      HttpRequest request = HttpRequest.newBuilder(URI.create(System.getenv("URL")))
          .header("Content-Type", "application/json")
          .header("Webhook-Timestamp", ts)
          .header("Webhook-Event-Id", id)
          .header("Webhook-Signature", signature)
          .POST(HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8))
          .build();
      HttpResponse<String> response = client.send(request, HttpResponse.BodyHandlers.ofString());
      System.out.println(response.body() + " " + response.statusCode());
    }
  }
}
