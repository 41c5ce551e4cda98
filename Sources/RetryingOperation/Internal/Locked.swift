import Foundation

/// Mutable state that any thread may read or change, one caller at a time.
///
/// The one lock box of the package: every piece of shared mutable state lives in a
/// `Locked`, and is reached only through ``withLock(_:)``. Never call user code or post
/// KVO notifications from inside the closure.
package final class Locked<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `value` is only touched while `lock` is held.
    private let lock = NSLock()
    private var value: Value

    package init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with exclusive access to the value.
    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
