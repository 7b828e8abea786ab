/**
 * `google.api.http` path templates, the subset this contract uses: literal segments and
 * single-segment variables bound to a (possibly nested) field, `{app_id}`, `{app.id}`, `{id=*}`.
 */
export type TemplateSegment = { literal: string } | { fieldPath: string[] };

export interface PathTemplate {
  source: string;
  segments: TemplateSegment[];
  /** Literal segments count; a more literal template wins when two match the same path. */
  literalCount: number;
}

export function parsePathTemplate(source: string): PathTemplate {
  if (!source.startsWith("/")) throw new Error(`path template ${source} must start with "/"`);
  const segments = source
    .slice(1)
    .split("/")
    .map((part): TemplateSegment => {
      const variable = /^\{([a-zA-Z_][a-zA-Z0-9_.]*)(=\*)?\}$/.exec(part);
      if (variable?.[1] !== undefined) return { fieldPath: variable[1].split(".") };
      if (part.includes("{") || part.includes("*") || part === "") {
        throw new Error(`path template ${source}: segment "${part}" is not supported`);
      }
      return { literal: part };
    });
  return { source, segments, literalCount: segments.filter((s) => "literal" in s).length };
}

export interface PathBinding {
  fieldPath: string[];
  value: string;
}

/**
 * The variable bindings when `pathSegments` (raw, still percent-encoded) match the template;
 * undefined when they do not. Throws URIError on a malformed percent-escape.
 */
export function matchPathTemplate(template: PathTemplate, pathSegments: readonly string[]): PathBinding[] | undefined {
  if (pathSegments.length !== template.segments.length) return undefined;
  const bindings: PathBinding[] = [];
  for (let i = 0; i < pathSegments.length; i++) {
    const segment = template.segments[i];
    const actual = pathSegments[i];
    if (segment === undefined || actual === undefined) return undefined;
    if ("literal" in segment) {
      if (segment.literal !== actual) return undefined;
    } else {
      if (actual === "") return undefined;
      bindings.push({ fieldPath: segment.fieldPath, value: decodeURIComponent(actual) });
    }
  }
  return bindings;
}
