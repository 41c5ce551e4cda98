import Foundation

/// A JSON value whose objects keep their keys in the order given, so the inspector's `--json`
/// output is stable from run to run.
///
/// ```swift
/// let value = JSONValue.object([("id", .string("A1")), ("retries", .integer(2))])
/// print(value.rendered())   // {"id":"A1","retries":2}
/// ```
enum JSONValue: Equatable {
    case null
    case bool(Bool)
    case integer(Int64)
    case unsignedInteger(UInt64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    /// Key–value pairs, written in this order.
    case object([(String, JSONValue)])

    static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        lhs.rendered() == rhs.rendered()
    }

    /// A string, or `null` when `value` is `nil`.
    static func string(_ value: String?) -> JSONValue {
        value.map { .string($0) } ?? .null
    }

    /// The JSON text; `pretty` puts each member on its own line, indented by two spaces.
    func rendered(pretty: Bool = false) -> String {
        var text = ""
        write(to: &text, pretty: pretty, indent: "")
        return text
    }

    private func write(to text: inout String, pretty: Bool, indent: String) {
        let inner = indent + "  "
        let separator = pretty ? ",\n" : ","
        switch self {
        case .null: text += "null"
        case .bool(let value): text += value ? "true" : "false"
        case .integer(let value): text += String(value)
        case .unsignedInteger(let value): text += String(value)
        case .double(let value):
            // JSON has no infinities or NaN.
            text += value.isFinite ? "\(value)" : Self.quoted("\(value)")
        case .string(let value): text += Self.quoted(value)
        case .array(let values):
            guard !values.isEmpty else { text += "[]"; return }
            text += pretty ? "[\n" : "["
            for (offset, value) in values.enumerated() {
                if offset > 0 { text += separator }
                if pretty { text += inner }
                value.write(to: &text, pretty: pretty, indent: inner)
            }
            text += pretty ? "\n\(indent)]" : "]"
        case .object(let members):
            guard !members.isEmpty else { text += "{}"; return }
            text += pretty ? "{\n" : "{"
            for (offset, (key, value)) in members.enumerated() {
                if offset > 0 { text += separator }
                if pretty { text += inner }
                text += Self.quoted(key) + (pretty ? ": " : ":")
                value.write(to: &text, pretty: pretty, indent: inner)
            }
            text += pretty ? "\n\(indent)}" : "}"
        }
    }

    /// `value` as a JSON string literal.
    static func quoted(_ value: String) -> String {
        var text = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            case _ where scalar.value < 0x20:
                text += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
            default: text.unicodeScalars.append(scalar)
            }
        }
        return text + "\""
    }
}
