import { getOption, ScalarType, type DescEnum, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { FieldBehavior, field_behavior } from "../../gen/google/api/field_behavior_pb.js";

/** A JSON Schema (2020-12, as OpenAPI 3.1 uses it) object. */
export type Schema = { [key: string]: unknown };

/** The proto3 JSON form of the well-known types, which are not plain objects on the wire. */
const wellKnown: Readonly<Record<string, Schema>> = {
  "google.protobuf.Timestamp": { type: "string", format: "date-time", examples: ["2025-01-02T03:04:05Z"] },
  "google.protobuf.Duration": { type: "string", pattern: "^-?[0-9]+(\\.[0-9]{1,9})?s$", examples: ["1.5s"] },
  "google.protobuf.FieldMask": {
    type: "string",
    description: "Comma-separated field paths in camelCase, e.g. `displayName,description`.",
  },
  "google.protobuf.Struct": { type: "object", additionalProperties: true },
  "google.protobuf.Value": { description: "Any JSON value." },
  "google.protobuf.ListValue": { type: "array", items: {} },
  "google.protobuf.Empty": { type: "object", additionalProperties: false },
  "google.protobuf.Any": {
    type: "object",
    properties: { "@type": { type: "string" } },
    required: ["@type"],
    additionalProperties: true,
  },
  "google.protobuf.StringValue": { type: ["string", "null"] },
  "google.protobuf.BytesValue": { type: ["string", "null"], contentEncoding: "base64" },
  "google.protobuf.BoolValue": { type: ["boolean", "null"] },
  "google.protobuf.Int32Value": { type: ["integer", "null"], format: "int32" },
  "google.protobuf.UInt32Value": { type: ["integer", "null"], format: "uint32" },
  "google.protobuf.Int64Value": { type: ["string", "null"], format: "int64" },
  "google.protobuf.UInt64Value": { type: ["string", "null"], format: "uint64" },
  "google.protobuf.FloatValue": { type: ["number", "null"], format: "float" },
  "google.protobuf.DoubleValue": { type: ["number", "null"], format: "double" },
};

/** The proto3 JSON schema of a scalar: 64-bit integers are strings on the wire, bytes are base64. */
export function scalarSchema(scalar: ScalarType): Schema {
  switch (scalar) {
    case ScalarType.STRING:
      return { type: "string" };
    case ScalarType.BOOL:
      return { type: "boolean" };
    case ScalarType.BYTES:
      return { type: "string", contentEncoding: "base64" };
    case ScalarType.DOUBLE:
      return { type: "number", format: "double" };
    case ScalarType.FLOAT:
      return { type: "number", format: "float" };
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { type: "integer", format: "int32" };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return { type: "integer", format: "uint32", minimum: 0 };
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return { type: "string", format: "int64" };
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return { type: "string", format: "uint64" };
  }
}

export function isWellKnown(message: DescMessage): boolean {
  return message.typeName in wellKnown;
}

/**
 * Turns messages and enums into `components.schemas` entries keyed by their full proto name
 * (`svc.api.app.v1.App`), with properties under their proto3 JSON (camelCase) names. A message is
 * added once, when first referenced, so only the types the operations reach are documented.
 */
export class SchemaCollector {
  readonly components: Record<string, Schema> = {};

  /** A `$ref` to the message's component (or the inline form of a well-known type). */
  messageRef(message: DescMessage): Schema {
    const known = wellKnown[message.typeName];
    if (known !== undefined) return { ...known };
    if (!(message.typeName in this.components)) {
      this.components[message.typeName] = {}; // placeholder first: recursive messages terminate
      this.components[message.typeName] = this.objectSchema(message, () => true);
    }
    return { $ref: `#/components/schemas/${message.typeName}` };
  }

  /**
   * An inline object schema of the message's fields that `include` keeps (path-bound fields left
   * out), after `google.api.field_behavior` in the protos: OUTPUT_ONLY and IDENTIFIER fields are
   * `readOnly` (a REST body never sets them: the server sets the first, the path carries the
   * second; a generated client leaves them out of its request types), REQUIRED ones `required`
   * (the server refuses a request without them with a 400 naming the field).
   */
  objectSchema(message: DescMessage, include: (field: DescField) => boolean): Schema {
    const properties: Record<string, Schema> = {};
    const required: string[] = [];
    for (const field of message.fields) {
      if (!include(field)) continue;
      const schema = this.fieldSchema(field);
      properties[field.jsonName] = isReadOnlyOverRest(field) ? { ...schema, readOnly: true } : schema;
      if (isRequired(field)) required.push(field.jsonName);
    }
    return { type: "object", properties, ...(required.length > 0 ? { required } : {}), additionalProperties: false };
  }

  /** The JSON schema of one field's value. */
  fieldSchema(field: DescField): Schema {
    switch (field.fieldKind) {
      case "scalar": {
        const schema = scalarSchema(field.scalar);
        // Explicit presence (`optional`): JSON null means "not set" (spec 2.1: "string or null").
        return field.presence === FeatureSet_FieldPresence.EXPLICIT && field.oneof === undefined ? nullable(schema) : schema;
      }
      case "enum":
        return this.enumRef(field.enum);
      case "message":
        return this.messageRef(field.message);
      case "list":
        return {
          type: "array",
          items:
            field.listKind === "scalar"
              ? scalarSchema(field.scalar)
              : field.listKind === "enum"
                ? this.enumRef(field.enum)
                : this.messageRef(field.message),
        };
      case "map":
        return {
          type: "object",
          additionalProperties:
            field.mapKind === "scalar"
              ? scalarSchema(field.scalar)
              : field.mapKind === "enum"
                ? this.enumRef(field.enum)
                : this.messageRef(field.message),
        };
    }
  }

  enumRef(descEnum: DescEnum): Schema {
    if (descEnum.typeName === "google.protobuf.NullValue") return { type: "null" };
    if (!(descEnum.typeName in this.components)) {
      this.components[descEnum.typeName] = { type: "string", enum: descEnum.values.map((v) => v.name) };
    }
    return { $ref: `#/components/schemas/${descEnum.typeName}` };
  }
}

/**
 * Never read from a REST body: OUTPUT_ONLY fields the server sets, and IDENTIFIER ones (a
 * resource's id), which an Update over gRPC and Connect must carry but REST takes from the path.
 */
export function isReadOnlyOverRest(field: DescField): boolean {
  const behavior = getOption(field, field_behavior);
  return behavior.includes(FieldBehavior.OUTPUT_ONLY) || behavior.includes(FieldBehavior.IDENTIFIER);
}

export function isRequired(field: DescField): boolean {
  return getOption(field, field_behavior).includes(FieldBehavior.REQUIRED);
}

function nullable(schema: Schema): Schema {
  return { ...schema, type: [schema["type"], "null"] };
}
