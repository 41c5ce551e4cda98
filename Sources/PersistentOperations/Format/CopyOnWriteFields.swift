import Foundation

/// A class holding the fields a value type rarely sets, kept out of line so that the value
/// stays small while they are unset (see `OperationRecord` and the queue's entries).
///
/// The value holds an optional instance, `nil` while every field has its default, and changes
/// a field through ``Swift/Optional/changeField(to:isDefault:_:)``, which copies the instance
/// first when another value shares it: the fields keep value semantics.
///
/// ```swift
/// final class Rare: CopyOnWriteFields {
///     var note: String?
///     var isDefault: Bool { note == nil }
///     func copy() -> Rare { let copy = Rare(); copy.note = note; return copy }
/// }
/// var rare: Rare?
/// rare.changeField(to: "hello", isDefault: false) { $0.note = $1 }   // makes the box
/// rare.changeField(to: nil as String?, isDefault: true) { $0.note = $1 }   // back to nil
/// ```
protocol CopyOnWriteFields: AnyObject {
    init()
    /// A new instance with the same fields.
    func copy() -> Self
    /// Whether every field has its default value.
    var isDefault: Bool { get }
}

extension Optional where Wrapped: CopyOnWriteFields {
    /// Sets a field to `value` through `set`: makes the instance when there is none (unless
    /// `value` is the default, which it already holds), copies it first when another value
    /// shares it, and drops it once every field is back to its default.
    mutating func changeField<Value>(to value: Value, isDefault: Bool, _ set: (Wrapped, Value) -> Void) {
        if self == nil {
            guard !isDefault else { return }
            self = Wrapped()
        } else if !isKnownUniquelyReferenced(&self) {
            self = self?.copy()
        }
        guard let box = self else { return }
        set(box, value)
        if isDefault, box.isDefault { self = nil }
    }
}
