import { toBinary, type DescFile, type DescMessage, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";

/**
 * What server reflection answers from: the files that declare the served services and every file
 * they import, indexed by file name and by fully-qualified symbol. Built once from the generated
 * descriptors (protobuf-es `file_*` exports), so reflection always describes exactly what is served.
 */
export class DescriptorIndex {
  /** Fully-qualified names of the served services, sorted. */
  readonly serviceNames: readonly string[];
  private readonly files = new Map<string, DescFile>();
  private readonly symbols = new Map<string, DescFile>();
  /** extendee type name -> extension number -> declaring file */
  private readonly extensions = new Map<string, Map<number, DescFile>>();
  private readonly serialized = new Map<string, Uint8Array>();

  constructor(services: readonly DescService[]) {
    this.serviceNames = [...new Set(services.map((s) => s.typeName))].sort();
    for (const service of services) this.addFile(service.file);
  }

  /** The file named `fileName` (e.g. `svc/api/app/v1/app.proto`) and its transitive imports, serialized. */
  fileByName(fileName: string): Uint8Array[] | undefined {
    const file = this.files.get(fileName);
    return file === undefined ? undefined : this.withDependencies(file);
  }

  /** The file declaring a service, method, message, field, enum or extension, and its transitive imports. */
  fileContainingSymbol(symbol: string): Uint8Array[] | undefined {
    const file = this.symbols.get(symbol);
    return file === undefined ? undefined : this.withDependencies(file);
  }

  fileContainingExtension(extendee: string, number: number): Uint8Array[] | undefined {
    const file = this.extensions.get(extendee)?.get(number);
    return file === undefined ? undefined : this.withDependencies(file);
  }

  /** Extension numbers known for a message type; undefined when the type is unknown. */
  extensionNumbersOf(typeName: string): number[] | undefined {
    if (!this.symbols.has(typeName)) return undefined;
    return [...(this.extensions.get(typeName)?.keys() ?? [])].sort((a, b) => a - b);
  }

  private addFile(file: DescFile): void {
    if (this.files.has(file.proto.name)) return;
    this.files.set(file.proto.name, file);
    for (const dependency of file.dependencies) this.addFile(dependency);
    for (const message of file.messages) this.addMessage(file, message);
    for (const e of file.enums) this.symbols.set(e.typeName, file);
    for (const service of file.services) {
      this.symbols.set(service.typeName, file);
      for (const method of service.methods) this.symbols.set(`${service.typeName}.${method.name}`, file);
    }
    for (const extension of file.extensions) this.addExtension(file, extension.typeName, extension.extendee.typeName, extension.number);
  }

  private addMessage(file: DescFile, message: DescMessage): void {
    this.symbols.set(message.typeName, file);
    for (const field of message.fields) this.symbols.set(`${message.typeName}.${field.name}`, file);
    for (const nested of message.nestedMessages) this.addMessage(file, nested);
    for (const e of message.nestedEnums) this.symbols.set(e.typeName, file);
    for (const extension of message.nestedExtensions) {
      this.addExtension(file, extension.typeName, extension.extendee.typeName, extension.number);
    }
  }

  private addExtension(file: DescFile, typeName: string, extendee: string, number: number): void {
    this.symbols.set(typeName, file);
    let byNumber = this.extensions.get(extendee);
    if (byNumber === undefined) {
      byNumber = new Map();
      this.extensions.set(extendee, byNumber);
    }
    byNumber.set(number, file);
  }

  /** The file first, then its imports, each once: clients resolve imports from the same answer. */
  private withDependencies(file: DescFile): Uint8Array[] {
    const ordered: DescFile[] = [];
    const seen = new Set<string>();
    const visit = (f: DescFile): void => {
      if (seen.has(f.proto.name)) return;
      seen.add(f.proto.name);
      ordered.push(f);
      for (const dependency of f.dependencies) visit(dependency);
    };
    visit(file);
    return ordered.map((f) => this.serialize(f));
  }

  private serialize(file: DescFile): Uint8Array {
    let bytes = this.serialized.get(file.proto.name);
    if (bytes === undefined) {
      bytes = toBinary(FileDescriptorProtoSchema, file.proto);
      this.serialized.set(file.proto.name, bytes);
    }
    return bytes;
  }
}
