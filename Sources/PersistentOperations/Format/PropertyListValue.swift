import Foundation

/// A value of the binary property-list subset that records are made of.
///
/// Records are written by ``BinaryPropertyListWriter`` and read by
/// ``BinaryPropertyListReader`` rather than by `PropertyListEncoder`/`PropertyListDecoder`,
/// so that every string (including `"$null"`) and every date reads back exactly.
package enum PropertyListValue: Equatable, Sendable {
    /// A Boolean.
    case bool(Bool)
    /// A signed integer.
    case integer(Int64)
    /// An unsigned integer above `Int64.max`, stored as a 16-byte integer.
    case unsignedInteger(UInt64)
    /// A floating-point number.
    case real(Double)
    /// A date, stored as seconds since 2001-01-01 00:00:00 UTC (exact to the bit).
    case date(Date)
    /// Raw bytes.
    case data(Data)
    /// A string.
    case string(String)
    /// An ordered list.
    case array([PropertyListValue])
    /// A dictionary with string keys.
    case dictionary([String: PropertyListValue])
}

extension PropertyListValue {
    /// Wraps an unsigned integer in the smallest case that holds it.
    package static func unsigned(_ value: UInt64) -> PropertyListValue {
        value <= UInt64(Int64.max) ? .integer(Int64(value)) : .unsignedInteger(value)
    }

    /// The value as a `String`, when it is one.
    package var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The value as an `Int`, when it is an integer that fits.
    package var intValue: Int? {
        switch self {
        case .integer(let value): return Int(exactly: value)
        case .unsignedInteger(let value): return Int(exactly: value)
        default: return nil
        }
    }

    /// The value as an `Int64`, when it is an integer that fits.
    package var int64Value: Int64? {
        switch self {
        case .integer(let value): return value
        case .unsignedInteger(let value): return Int64(exactly: value)
        default: return nil
        }
    }

    /// The value as a `UInt64`, when it is a non-negative integer.
    package var unsignedValue: UInt64? {
        switch self {
        case .integer(let value): return UInt64(exactly: value)
        case .unsignedInteger(let value): return value
        default: return nil
        }
    }

    /// The value as a `Double`, when it is a real (or an integer, which a hand-edited plist may hold).
    package var realValue: Double? {
        switch self {
        case .real(let value): return value
        case .integer(let value): return Double(value)
        default: return nil
        }
    }

    /// The value as a `Date`, when it is one.
    package var dateValue: Date? {
        if case .date(let value) = self { return value }
        return nil
    }

    /// The value as `Data`, when it is data.
    package var dataValue: Data? {
        if case .data(let value) = self { return value }
        return nil
    }
}
