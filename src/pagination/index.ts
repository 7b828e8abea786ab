export { effectivePageSize } from "./page-size.js";
export { PageTokenCodec } from "./page-token.js";
export { paginate, paginateAsync, listingFingerprint, type Page, type PageRequest } from "./paginate.js";
