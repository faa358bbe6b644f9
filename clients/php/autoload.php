<?php
// PSR-4 autoloader for the Delayq\ namespace, for projects without Composer:
//     require '/path/to/delayq/clients/php/autoload.php';

spl_autoload_register(static function (string $class): void {
    $prefix = 'Delayq\\';
    if (strncmp($class, $prefix, strlen($prefix)) !== 0) {
        return;
    }
    $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
    if (is_file($file)) {
        require $file;
    }
});
