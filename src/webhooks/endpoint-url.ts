/** The path prefix of every listener's endpoint. */
export const webhookPathPrefix = "/api/v1/webhooks/incoming/";

/** `{base_url}/api/v1/webhooks/incoming/{listener_id}`: shown on the automation and the JWT `aud`. */
export function webhookEndpointUrl(baseUrl: string, listenerId: string): string {
  return `${baseUrl}${webhookPathPrefix}${listenerId}`;
}

/** The tenant base URL of an endpoint URL (the JWT `sub` a sender must use), or undefined. */
export function baseUrlOfEndpoint(endpointUrl: string): string | undefined {
  const at = endpointUrl.indexOf(webhookPathPrefix);
  return at === -1 ? undefined : endpointUrl.slice(0, at);
}
